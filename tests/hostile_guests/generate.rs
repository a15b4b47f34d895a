//! Modules aimed at a host's resources, drawn from any bytes: a third from `wasm-smith` (ABI
//! shaped half the time, see `fuzz/src/smith.rs`), the rest built here from a [`Plan`]: an ABI
//! 1 command whose `_start` runs a few hostile actions once, forever, or written out up to a
//! thousand times in a straight line (no loop and no call: what only the checks after each
//! bulk instruction stop in time) — memory and table grows, fills and copies of every size,
//! host calls with lengths and counts at the edges of memory and past them (on iovec and
//! subscription arrays it laid out first), files written a byte at a time far apart (holes the
//! write budget must count), and recursion, with a host call at the bottom of it. Every number
//! comes from a list of edge values or from the bytes, so the same bytes always make the same
//! module.

use arbitrary::{Result, Unstructured};
use hako_engine_api::{Import, ValType as AbiType};
use wasm_encoder::{
    BlockType, CodeSection, ExportKind, ExportSection, Function, FunctionSection, ImportSection,
    Instruction, MemorySection, MemoryType, Module, RefType, TableSection, TableType, TypeSection,
    ValType,
};

#[path = "../../fuzz/src/smith.rs"]
mod smith;

/// A module from `u`: `wasm-smith`'s or a hostile plan's.
pub fn module(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    if u.ratio(1, 3)? {
        smith::smith_module(u)
    } else {
        Ok(Plan::draw(u)?.encode())
    }
}

/// Lengths, counts, offsets and deltas at the edges of what hosts get wrong.
const EDGES: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    48,
    255,
    1023,
    1024,
    1025,
    4095,
    4096,
    4097,
    65_535,
    65_536,
    65_537,
    1 << 20,
    (1 << 24) - 1,
    1 << 30,
    0x3fff_ffff,
    0x7fff_ffff,
    0x8000_0000,
    0xf000_0000,
    0xffff_fffe,
    0xffff_ffff,
    u64::MAX,
];

/// An edge value, or now and then any value.
fn edge(u: &mut Unstructured<'_>) -> Result<u64> {
    if u.ratio(1, 5)? {
        u.arbitrary()
    } else {
        Ok(*u.choose(EDGES)?)
    }
}

fn edge32(u: &mut Unstructured<'_>) -> Result<i32> {
    Ok(edge(u)? as u32 as i32)
}

/// One thing `_start` does.
#[derive(Debug)]
enum Action {
    MemoryGrow(i32),
    MemoryFill {
        at: i32,
        len: i32,
    },
    MemoryCopy {
        to: i32,
        from: i32,
        len: i32,
    },
    TableGrow {
        table: u32,
        delta: i32,
    },
    TableFill {
        table: u32,
        at: i32,
        len: i32,
    },
    /// `count` iovec-shaped records of 8 bytes (`buffer`, `len`) from `at`, for host calls.
    Records {
        at: i32,
        count: i32,
        buffer: i32,
        len: i32,
    },
    /// A call of the module's `import`-th import with these arguments.
    Host {
        import: u32,
        args: Vec<u64>,
    },
    /// Recursion `depth` deep (a trap when it exhausts the stack).
    Recurse {
        depth: i32,
    },
    /// Recursion `depth` deep, then the module's first import at the bottom.
    HostDeep {
        depth: i32,
    },
    /// A file `sparse` made in the first preopen (fd 3), then one byte written `count` times,
    /// `stride` bytes apart, with `fd_pwrite`: holes a write budget must count.
    SparseFile {
        stride: i32,
        count: i32,
    },
}

/// A hostile module before it is encoded.
#[derive(Debug)]
struct Plan {
    memory_min: u64,
    memory_max: Option<u64>,
    tables: Vec<(u64, Option<u64>)>,
    imports: Vec<Import>,
    /// The first import's arguments when `HostDeep` calls it.
    deep_args: Vec<u64>,
    actions: Vec<Action>,
    forever: bool,
    /// How many times the actions are written out one after another in `_start`.
    straight: u32,
}

/// The imports a plan may draw: those whose work grows with what the guest asks.
const HOSTILE_IMPORTS: &[Import] = &[
    Import::RandomGet,
    Import::FdWrite,
    Import::FdRead,
    Import::FdPwrite,
    Import::FdPread,
    Import::FdReaddir,
    Import::PollOneoff,
    Import::PathOpen,
    Import::PathCreateDirectory,
    Import::PathFilestatGet,
    Import::PathSymlink,
    Import::FdFilestatSetSize,
    Import::ArgsGet,
    Import::EnvironSizesGet,
    Import::ClockTimeGet,
    Import::SchedYield,
    Import::HttpRequest,
    Import::HttpReadResponse,
];

impl Plan {
    fn draw(u: &mut Unstructured<'_>) -> Result<Plan> {
        let memory_min = u.int_in_range(0..=300)?;
        let memory_max = if u.ratio(1, 4)? {
            Some(memory_min + u.int_in_range(0..=64)?)
        } else {
            None
        };
        let mut tables = Vec::new();
        for _ in 0..u.int_in_range(0..=2)? {
            let min = *u.choose(&[0, 1, 10, 1000, 65_536])?;
            let max = if u.ratio(1, 3)? {
                Some(min.max(edge(u)?.min(u64::from(u32::MAX))))
            } else {
                None
            };
            tables.push((min, max));
        }
        let mut imports = Vec::new();
        for _ in 0..u.int_in_range(1..=4)? {
            let import = *u.choose(HOSTILE_IMPORTS)?;
            if !imports.contains(&import) {
                imports.push(import);
            }
        }
        let deep_args = args(u, imports[0])?;
        let mut actions = Vec::new();
        for _ in 0..u.int_in_range(1..=6)? {
            let action = match u.int_in_range(0..=10)? {
                0 => Action::MemoryGrow(edge32(u)?),
                1 => Action::MemoryFill {
                    at: edge32(u)?,
                    len: edge32(u)?,
                },
                2 => Action::MemoryCopy {
                    to: edge32(u)?,
                    from: edge32(u)?,
                    len: edge32(u)?,
                },
                3 | 4 if !tables.is_empty() => Action::TableGrow {
                    table: u.choose_index(tables.len())? as u32,
                    delta: edge32(u)?,
                },
                3 if !tables.is_empty() => Action::TableFill {
                    table: u.choose_index(tables.len())? as u32,
                    at: edge32(u)?,
                    len: edge32(u)?,
                },
                5 => Action::Records {
                    at: edge32(u)?,
                    count: edge32(u)?.min(1 << 21),
                    buffer: edge32(u)?,
                    len: edge32(u)?,
                },
                6 => Action::Recurse { depth: edge32(u)? },
                10 => Action::SparseFile {
                    stride: *u.choose(&[1, 4096, 65_536, 1 << 20, 1 << 30])?,
                    count: *u.choose(&[1, 100, 10_000, 1_000_000])?,
                },
                7 => Action::HostDeep { depth: edge32(u)? },
                _ => {
                    let import = u.choose_index(imports.len())? as u32;
                    Action::Host {
                        import,
                        args: args(u, imports[import as usize])?,
                    }
                }
            };
            actions.push(action);
        }
        // A sparse file needs its two imports, whatever else was drawn.
        if actions
            .iter()
            .any(|action| matches!(action, Action::SparseFile { .. }))
        {
            for import in [Import::PathOpen, Import::FdPwrite] {
                if !imports.contains(&import) {
                    imports.push(import);
                }
            }
        }
        Ok(Plan {
            memory_min,
            memory_max,
            tables,
            imports,
            deep_args,
            actions,
            forever: u.ratio(1, 2)?,
            // Up to 6 actions of at most ~120 bytes each (a record loop), 1,000 times: within the
            // 1 MiB a function body may have.
            straight: if u.ratio(1, 4)? {
                *u.choose(&[10, 200, 1_000])?
            } else {
                1
            },
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut types = TypeSection::new();
        let valtype = |t: &AbiType| match t {
            AbiType::I32 => ValType::I32,
            AbiType::I64 => ValType::I64,
        };
        for import in &self.imports {
            types.ty().function(
                import.params().iter().map(valtype),
                import.results().iter().map(valtype),
            );
        }
        let base = self.imports.len() as u32;
        let (start_type, depth_type) = (base, base + 1);
        types.ty().function([], []);
        types.ty().function([ValType::I32], []);

        let mut imports = ImportSection::new();
        for (index, import) in self.imports.iter().enumerate() {
            imports.import(
                import.module(),
                import.name(),
                wasm_encoder::EntityType::Function(index as u32),
            );
        }
        // Functions: `_start`, then the recursion, then the recursion with a host call.
        let (start, recurse, deep) = (base, base + 1, base + 2);
        let mut functions = FunctionSection::new();
        functions.function(start_type);
        functions.function(depth_type);
        functions.function(depth_type);

        let mut tables = TableSection::new();
        for &(minimum, maximum) in &self.tables {
            tables.table(TableType {
                element_type: RefType::FUNCREF,
                table64: false,
                minimum,
                maximum,
                shared: false,
            });
        }
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: self.memory_min,
            maximum: self.memory_max,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        exports.export("_start", ExportKind::Func, start);

        let mut code = CodeSection::new();
        code.function(&self.start_body(recurse, deep));
        code.function(&recursion(recurse, None));
        code.function(&recursion(deep, Some(self.import_call(0, &self.deep_args))));

        let mut module = Module::new();
        module.section(&types);
        module.section(&imports);
        module.section(&functions);
        if !self.tables.is_empty() {
            module.section(&tables);
        }
        module.section(&memories);
        module.section(&exports);
        module.section(&code);
        module.finish()
    }

    /// The instructions that call import `index` with `args` and drop what it answers.
    fn import_call(&self, index: u32, args: &[u64]) -> Vec<Instruction<'static>> {
        let import = self.imports[index as usize];
        let mut out: Vec<Instruction<'static>> = import
            .params()
            .iter()
            .zip(args)
            .map(|(t, &value)| match t {
                AbiType::I32 => Instruction::I32Const(value as u32 as i32),
                AbiType::I64 => Instruction::I64Const(value as i64),
            })
            .collect();
        out.push(Instruction::Call(index));
        if !import.results().is_empty() {
            out.push(Instruction::Drop);
        }
        out
    }

    fn start_body(&self, recurse: u32, deep: u32) -> Function {
        let mut f = Function::new([(1, ValType::I32)]);
        if self.forever {
            f.instruction(&Instruction::Loop(BlockType::Empty));
        }
        for _ in 0..self.straight {
            for action in &self.actions {
                for instruction in self.action(action, recurse, deep) {
                    f.instruction(&instruction);
                }
            }
        }
        if self.forever {
            f.instruction(&Instruction::Br(0));
            f.instruction(&Instruction::End);
        }
        f.instruction(&Instruction::End);
        f
    }

    fn action(&self, action: &Action, recurse: u32, deep: u32) -> Vec<Instruction<'static>> {
        use Instruction as I;
        match *action {
            Action::MemoryGrow(delta) => vec![I::I32Const(delta), I::MemoryGrow(0), I::Drop],
            Action::MemoryFill { at, len } => {
                vec![
                    I::I32Const(at),
                    I::I32Const(0x5a),
                    I::I32Const(len),
                    I::MemoryFill(0),
                ]
            }
            Action::MemoryCopy { to, from, len } => vec![
                I::I32Const(to),
                I::I32Const(from),
                I::I32Const(len),
                I::MemoryCopy {
                    src_mem: 0,
                    dst_mem: 0,
                },
            ],
            Action::TableGrow { table, delta } => vec![
                I::RefNull(wasm_encoder::HeapType::FUNC),
                I::I32Const(delta),
                I::TableGrow(table),
                I::Drop,
            ],
            Action::TableFill { table, at, len } => vec![
                I::I32Const(at),
                I::RefNull(wasm_encoder::HeapType::FUNC),
                I::I32Const(len),
                I::TableFill(table),
            ],
            Action::Records {
                at,
                count,
                buffer,
                len,
            } => records(at, count, buffer, len),
            Action::Host { import, ref args } => self.import_call(import, args),
            Action::Recurse { depth } => vec![I::I32Const(depth), I::Call(recurse)],
            Action::HostDeep { depth } => vec![I::I32Const(depth), I::Call(deep)],
            Action::SparseFile { stride, count } => self.sparse_file(stride, count),
        }
    }

    /// The instructions of [`Action::SparseFile`]: its name, iovec and byte at the bottom of
    /// memory (a store out of bounds traps, as it would in any guest), then `path_open` and
    /// the loop of `fd_pwrite`, local 0 counting; their errnos are dropped.
    fn sparse_file(&self, stride: i32, count: i32) -> Vec<Instruction<'static>> {
        use Instruction as I;
        const NAME_AT: i32 = 0;
        const IOVEC_AT: i32 = 16;
        const BYTE_AT: i32 = 24;
        const FD_AT: i32 = 32;
        const WRITTEN_AT: i32 = 40;
        let index = |wanted: Import| {
            self.imports
                .iter()
                .position(|import| *import == wanted)
                .expect("a plan with a sparse file imports what it needs") as u32
        };
        let store =
            |at: i32, value: i32| vec![I::I32Const(at), I::I32Const(value), I::I32Store(memarg())];
        let mut out = Vec::new();
        out.extend(store(NAME_AT, i32::from_le_bytes(*b"spar")));
        out.extend(store(NAME_AT + 4, i32::from_le_bytes(*b"se\0\0")));
        out.extend(store(IOVEC_AT, BYTE_AT));
        out.extend(store(IOVEC_AT + 4, 1));
        out.extend(store(BYTE_AT, 0x78));
        // path_open(3, 0, "sparse", O_CREAT, FD_WRITE | FD_SEEK, 0, 0, FD_AT)
        out.extend([
            I::I32Const(3),
            I::I32Const(0),
            I::I32Const(NAME_AT),
            I::I32Const(6),
            I::I32Const(1),
            I::I64Const(0x44),
            I::I64Const(0),
            I::I32Const(0),
            I::I32Const(FD_AT),
            I::Call(index(Import::PathOpen)),
            I::Drop,
        ]);
        // fd_pwrite(fd, IOVEC_AT, 1, i * stride, WRITTEN_AT)
        out.extend(counted_loop(
            count,
            vec![
                I::I32Const(FD_AT),
                I::I32Load(memarg()),
                I::I32Const(IOVEC_AT),
                I::I32Const(1),
                I::LocalGet(0),
                I::I64ExtendI32U,
                I::I64Const(i64::from(stride as u32)),
                I::I64Mul,
                I::I32Const(WRITTEN_AT),
                I::Call(index(Import::FdPwrite)),
                I::Drop,
            ],
        ));
        out
    }
}

/// Arguments for `import`: an edge value each.
fn args(u: &mut Unstructured<'_>, import: Import) -> Result<Vec<u64>> {
    import.params().iter().map(|_| edge(u)).collect()
}

/// `count` records of (`buffer`, `len`) from `at`, stored in a loop with local 0 as the
/// index; a store out of bounds traps, as it would in any guest.
fn records(at: i32, count: i32, buffer: i32, len: i32) -> Vec<Instruction<'static>> {
    use Instruction as I;
    let address = |offset: u64| {
        vec![
            I::I32Const(at),
            I::LocalGet(0),
            I::I32Const(8),
            I::I32Mul,
            I::I32Add,
            I::I32Const(offset as i32),
            I::I32Add,
        ]
    };
    let mut body = address(0);
    body.extend([I::I32Const(buffer), I::I32Store(memarg())]);
    body.extend(address(4));
    body.extend([I::I32Const(len), I::I32Store(memarg())]);
    counted_loop(count, body)
}

/// `body` run `count` times, local 0 counting from 0.
fn counted_loop(count: i32, body: Vec<Instruction<'static>>) -> Vec<Instruction<'static>> {
    use Instruction as I;
    let mut out = vec![
        I::I32Const(0),
        I::LocalSet(0),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(0),
        I::I32Const(count),
        I::I32GeU,
        I::BrIf(1),
    ];
    out.extend(body);
    out.extend([
        I::LocalGet(0),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(0),
        I::Br(0),
        I::End,
        I::End,
    ]);
    out
}

fn memarg() -> wasm_encoder::MemArg {
    wasm_encoder::MemArg {
        offset: 0,
        align: 0,
        memory_index: 0,
    }
}

/// `f(n)`: `n` deep in calls of itself (each frame with a few locals), then `bottom` (the
/// instructions of a host call) if given, at the deepest frame.
fn recursion(index: u32, bottom: Option<Vec<Instruction<'static>>>) -> Function {
    use Instruction as I;
    let mut f = Function::new([(4, ValType::I64)]);
    let mut body = vec![
        I::LocalGet(0),
        I::If(BlockType::Empty),
        I::LocalGet(0),
        I::I32Const(1),
        I::I32Sub,
        I::Call(index),
        I::Else,
    ];
    if let Some(call) = bottom {
        body.extend(call);
    }
    body.extend([I::End, I::End]);
    for instruction in &body {
        f.instruction(instruction);
    }
    f
}
