//! How much a module may declare: counts of types, functions, imports, exports, globals,
//! tables, data and element segments; each function's size, locals and nesting; each table's
//! minimum. What no real package comes near is refused here, naming the rule, so that no host
//! ever compiles or instantiates it; what a module may legitimately use is bounded again at
//! run time (tables by the run's table bound and the memory cap, the stack by the engines).
//!
//! The numbers are hako's own, tighter than the validator's (wasmparser's, the JS API's:
//! 1,000,000 functions, 7,654,321 bytes a function, 50,000 locals), where a larger count costs
//! the host memory per instance (every global, function reference and export is copied into
//! each instance) or makes a compiler's time or memory grow faster than the module: the
//! largest programs built for WebAssembly (interpreters, databases, image codecs) stay well
//! inside them. The table bound is the one every engine enforces at run time
//! ([`hako_engine_api::MAX_TABLE_ELEMENTS`]), and at most four tables is what hako's wasmtime
//! engine's instance pool holds.
//!
//! The walk reads the module once; a part it cannot read is left to validation, which reports
//! the module invalid.

use hako_engine_api::MAX_TABLE_ELEMENTS;
use wasmparser::{Operator, Parser, Payload};

use crate::package::Problem;

/// One bound of the check: what it counts, the most allowed, and the rule that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub rule: &'static str,
    pub what: &'static str,
    pub most: u64,
}

/// Types declared in the type section.
pub const TYPES: Bound = Bound {
    rule: "module.types",
    what: "types",
    most: 100_000,
};
/// Functions, imported and defined.
pub const FUNCTIONS: Bound = Bound {
    rule: "module.functions",
    what: "functions",
    most: 100_000,
};
/// Imports (each a function of the ABI; the same one may be imported more than once).
pub const IMPORTS: Bound = Bound {
    rule: "module.imports",
    what: "imports",
    most: 1_000,
};
/// Exports.
pub const EXPORTS: Bound = Bound {
    rule: "module.exports",
    what: "exports",
    most: 1_000,
};
/// The bytes of every import's module and field name and every export's name, together:
/// engines copy the names into each instance (wasmer at every instantiation), outside any
/// memory cap, so a module of long names would make each call allocate that much.
pub const NAMES: Bound = Bound {
    rule: "module.names",
    what: "bytes of import and export names",
    most: 256 << 10,
};
/// Globals.
pub const GLOBALS: Bound = Bound {
    rule: "module.globals",
    what: "globals",
    most: 10_000,
};
/// Tables.
pub const TABLES: Bound = Bound {
    rule: "module.table",
    what: "tables",
    most: 4,
};
/// A table's declared minimum, in elements.
pub const TABLE_MINIMUM: Bound = Bound {
    rule: "module.table",
    what: "elements in a table's minimum",
    most: MAX_TABLE_ELEMENTS as u64,
};
/// Data segments.
pub const DATA_SEGMENTS: Bound = Bound {
    rule: "module.data",
    what: "data segments",
    most: 100_000,
};
/// Passive data segments: wasmer keeps a map of them in every instance (an entry each, outside
/// the memory cap), where wasmtime keeps a bit. Toolchains write a few at most (`memory.init`
/// of a shared memory's data at start); a thousand cost an instance about 32 KiB.
pub const PASSIVE_DATA_SEGMENTS: Bound = Bound {
    rule: "module.data",
    what: "passive data segments",
    most: 1_000,
};
/// Element segments.
pub const ELEMENT_SEGMENTS: Bound = Bound {
    rule: "module.elements",
    what: "element segments",
    most: 10_000,
};
/// Items in all element segments together: what every table of the module can hold.
pub const ELEMENT_ITEMS: Bound = Bound {
    rule: "module.elements",
    what: "items in all element segments",
    most: TABLES.most * MAX_TABLE_ELEMENTS as u64,
};
/// Items in passive element segments together: wasmer copies each into every instance (8 bytes
/// an item, outside the memory cap), so they are bounded by what one table can hold (512 KiB an
/// instance at most). Toolchains write element segments active or declared, which cost nothing.
pub const PASSIVE_ELEMENT_ITEMS: Bound = Bound {
    rule: "module.elements",
    what: "items in passive element segments",
    most: MAX_TABLE_ELEMENTS as u64,
};
/// The bytes of one function body.
pub const FUNCTION_BYTES: Bound = Bound {
    rule: "module.function_size",
    what: "bytes in one function body",
    most: 1 << 20,
};
/// The locals of one function, its parameters included.
pub const LOCALS: Bound = Bound {
    rule: "module.locals",
    what: "locals in one function",
    most: 10_000,
};
/// Blocks, loops and ifs open at once in one function.
pub const NESTING: Bound = Bound {
    rule: "module.nesting",
    what: "blocks nested in one function",
    most: 1_000,
};

/// Every bound, for the README's table and the tests.
pub const ALL: [Bound; 16] = [
    TYPES,
    FUNCTIONS,
    IMPORTS,
    EXPORTS,
    NAMES,
    GLOBALS,
    TABLES,
    TABLE_MINIMUM,
    DATA_SEGMENTS,
    PASSIVE_DATA_SEGMENTS,
    ELEMENT_SEGMENTS,
    ELEMENT_ITEMS,
    PASSIVE_ELEMENT_ITEMS,
    FUNCTION_BYTES,
    LOCALS,
    NESTING,
];

/// One problem for every bound `wasm` passes, naming where and by how much.
pub(super) fn check(wasm: &[u8]) -> Vec<Problem> {
    let mut counts = Counts::default();
    // A read error only cuts the walk short: validation reports it.
    let _ = counts.walk(wasm);
    counts.problems
}

/// What the walk counted so far, and the problems found.
#[derive(Default)]
struct Counts {
    functions: u64,
    tables: u64,
    element_items: u64,
    /// Bytes of import and export names so far.
    names: u64,
    /// The index of the next function body (imports first).
    body: u64,
    problems: Vec<Problem>,
}

impl Counts {
    fn over(&mut self, bound: Bound, found: u64, place: impl FnOnce() -> String) {
        if found > bound.most {
            let place = place();
            self.problems.push(Problem::new(
                bound.rule,
                format!(
                    "{place}has {found} {}; at most {} are allowed",
                    bound.what, bound.most
                ),
            ));
        }
    }

    fn module(&mut self, bound: Bound, found: u64) {
        self.over(bound, found, || "the module ".to_string());
    }

    fn walk(&mut self, wasm: &[u8]) -> wasmparser::Result<()> {
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::TypeSection(reader) => self.module(TYPES, reader.count().into()),
                Payload::ImportSection(reader) => {
                    let mut imports = 0u64;
                    for import in reader.into_imports() {
                        let import = import?;
                        if matches!(
                            import.ty,
                            wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                        ) {
                            self.functions += 1;
                        }
                        self.names += (import.module.len() + import.name.len()) as u64;
                        imports += 1;
                    }
                    self.body = self.functions;
                    self.module(IMPORTS, imports);
                    self.module(NAMES, self.names);
                }
                Payload::FunctionSection(reader) => {
                    self.functions += u64::from(reader.count());
                    self.module(FUNCTIONS, self.functions);
                }
                Payload::TableSection(reader) => {
                    for table in reader {
                        let table = table?;
                        let index = self.tables;
                        self.tables += 1;
                        self.over(TABLE_MINIMUM, table.ty.initial, || {
                            format!("table {index} ")
                        });
                    }
                    self.module(TABLES, self.tables);
                }
                Payload::GlobalSection(reader) => self.module(GLOBALS, reader.count().into()),
                Payload::ExportSection(reader) => {
                    self.module(EXPORTS, reader.count().into());
                    for export in reader {
                        self.names += export?.name.len() as u64;
                    }
                    self.module(NAMES, self.names);
                }
                Payload::ElementSection(reader) => {
                    self.module(ELEMENT_SEGMENTS, reader.count().into());
                    let mut passive_items = 0u64;
                    for element in reader {
                        let element = element?;
                        let count = u64::from(match element.items {
                            wasmparser::ElementItems::Functions(items) => items.count(),
                            wasmparser::ElementItems::Expressions(_, items) => items.count(),
                        });
                        self.element_items += count;
                        if matches!(element.kind, wasmparser::ElementKind::Passive) {
                            passive_items += count;
                        }
                    }
                    self.module(ELEMENT_ITEMS, self.element_items);
                    self.module(PASSIVE_ELEMENT_ITEMS, passive_items);
                }
                Payload::DataSection(reader) => {
                    self.module(DATA_SEGMENTS, reader.count().into());
                    let mut passive = 0u64;
                    for segment in reader {
                        if matches!(segment?.kind, wasmparser::DataKind::Passive) {
                            passive += 1;
                        }
                    }
                    self.module(PASSIVE_DATA_SEGMENTS, passive);
                }
                Payload::CodeSectionEntry(body) => {
                    let index = self.body;
                    self.body += 1;
                    self.function(index, &body)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The bounds of one function body: its size, its locals, its nesting.
    fn function(&mut self, index: u64, body: &wasmparser::FunctionBody) -> wasmparser::Result<()> {
        let place = || format!("function {index} ");
        let range = body.range();
        let size = range.end - range.start;
        self.over(FUNCTION_BYTES, size, place);
        if size > FUNCTION_BYTES.most {
            // Its locals and nesting are beside the point, and walking it would be the cost.
            return Ok(());
        }
        let mut locals = 0u64;
        for group in body.get_locals_reader()? {
            locals = locals.saturating_add(group?.0.into());
        }
        self.over(LOCALS, locals, place);
        let mut depth = 0u64;
        let mut deepest = 0u64;
        let mut operators = body.get_operators_reader()?;
        while !operators.eof() {
            match operators.read()? {
                Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                Operator::End => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        self.over(NESTING, deepest, place);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_and_messages(wat: &str) -> Vec<(&'static str, String)> {
        let wasm = wat::parse_str(wat).unwrap();
        check(&wasm)
            .into_iter()
            .map(|problem| (problem.rule, problem.message))
            .collect()
    }

    #[test]
    fn a_modest_module_is_within_every_bound() {
        let wat = r#"(module (type (func)) (import "wasi_snapshot_preview1" "sched_yield"
            (func (result i32))) (table 10 funcref) (memory (export "memory") 1)
            (global (mut i32) (i32.const 0)) (elem (i32.const 0) func 0)
            (data (i32.const 0) "x") (func (export "_start") (local i32 i64)
            (block (loop (br 1)))))"#;
        assert_eq!(rules_and_messages(wat), []);
    }

    #[test]
    fn a_table_above_the_bound_and_a_fifth_table_are_refused() {
        let found = rules_and_messages(
            "(module (table 65537 funcref) (table 1 funcref) (table 1 funcref)
             (table 1 externref) (table 0 funcref))",
        );
        assert_eq!(
            found,
            [
                (
                    "module.table",
                    "table 0 has 65537 elements in a table's minimum; at most 65536 are allowed"
                        .to_string()
                ),
                (
                    "module.table",
                    "the module has 5 tables; at most 4 are allowed".to_string()
                )
            ]
        );
    }

    #[test]
    fn too_many_locals_and_too_deep_nesting_name_the_function() {
        let deep = "(block ".repeat(1001) + &")".repeat(1001);
        let wat = format!(
            "(module (func) (func (local i32 i32) {deep}) (func (local {})))",
            "i64 ".repeat(10_001)
        );
        let found = rules_and_messages(&wat);
        assert_eq!(
            found,
            [
                (
                    "module.nesting",
                    "function 1 has 1001 blocks nested in one function; at most 1000 are allowed"
                        .to_string()
                ),
                (
                    "module.locals",
                    "function 2 has 10001 locals in one function; at most 10000 are allowed"
                        .to_string()
                )
            ]
        );
    }

    #[test]
    fn counts_of_the_module_name_their_rules() {
        let globals = "(global i32 (i32.const 0))".repeat(10_001);
        let exports: String = (0..1001)
            .map(|i| format!("(export \"f{i}\" (func 0))"))
            .collect();
        let wat = format!("(module (func) {globals} {exports})");
        let rules: Vec<_> = rules_and_messages(&wat)
            .into_iter()
            .map(|(rule, _)| rule)
            .collect();
        assert_eq!(rules, ["module.globals", "module.exports"]);
    }

    #[test]
    fn import_and_export_names_past_their_bound_together_are_refused() {
        // Each name alone is modest (a parser takes names up to 100,000 bytes); together they
        // pass 256 KiB.
        let long = "n".repeat(50_000);
        let exports: String = (0..5)
            .map(|i| format!(r#"(export "{long}{i}" (func 1))"#))
            .collect();
        let wat = format!(
            r#"(module (import "wasi_snapshot_preview1" "{long}" (func)) (func) {exports})"#
        );
        assert_eq!(
            rules_and_messages(&wat),
            [(
                "module.names",
                "the module has 300027 bytes of import and export names; at most 262144 are \
                 allowed"
                    .to_string()
            )]
        );
        let within = format!(r#"(module (func) (export "{long}" (func 0)))"#);
        assert_eq!(rules_and_messages(&within), []);
    }

    #[test]
    fn a_function_body_past_its_bound_is_refused_without_a_walk() {
        let body = "(drop (i32.const 0))".repeat(400_000);
        let wat = format!("(module (func {body}))");
        let found = rules_and_messages(&wat);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "module.function_size");
        assert!(found[0].1.starts_with("function 0 has "), "{}", found[0].1);
    }
}
