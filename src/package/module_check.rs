//! The static check of `module.wasm` against ABI 1, without compiling or running it.
//!
//! A module passes when:
//!
//! - it is a WebAssembly **core module**; a component is refused by name (`module.component`);
//! - it is valid WebAssembly (`module.invalid`);
//! - it needs nothing beyond **WebAssembly 2.0**: mutable globals, bulk memory, reference types,
//!   multi-value, sign extension, non-trapping float-to-int and 128-bit SIMD. Every other
//!   feature (threads and shared memory, exceptions, tail calls, memory64, multiple memories,
//!   relaxed SIMD, GC, typed function references, extended constants, …) is refused naming the
//!   feature and, when an instruction needs it, the instruction (`module.feature`);
//! - it exports `_start` as a function of type `[] -> []` (`export.start`) and its linear
//!   memory as `memory` (`export.memory`);
//! - every import is a function from the ABI's table, [`hako_engine_api::Import`], with
//!   exactly the table's signature (`import.unknown`, `import.kind`, `import.signature`);
//! - it declares no more than a real package needs: counts of types, functions, imports,
//!   exports, globals, tables, data and element segments, each table's minimum, and each
//!   function's size, locals and nesting ([`limits`], `module.types`, `module.table`, …).
//!
//! Passing the check does not bound what a module does when it runs: its memory and tables
//! are bounded by the call's memory cap and table bound, its time by the call's limit, its
//! stack by the engine, and its compile by the compile's own time and memory bounds.
//!
//! Every problem is reported, not only the first. On success the check also says whether the
//! module uses SIMD, since the singlepass compiler cannot compile it.
//!
//! This module reads bytes only; it does not compile them, and it does not know where they
//! came from.

mod features;
pub mod limits;

use hako_engine_api::{Import, ValType as AbiType, HTTP_MODULE, WASI_MODULE};
use wasmparser::{
    CompositeInnerType, Encoding, ExternalKind, FunctionBody, Parser, Payload, TypeRef, ValType,
};

use super::Problem;

/// What the check learned about a module it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleFacts {
    /// The module uses a `v128` type or a SIMD instruction somewhere.
    pub uses_simd: bool,
}

/// Checks `wasm` against every ABI 1 rule, returning all the problems found.
pub fn check_module(wasm: &[u8]) -> Result<ModuleFacts, Vec<Problem>> {
    if !Parser::is_core_wasm(wasm) {
        return Err(vec![not_a_module(wasm)]);
    }
    let mut problems = Vec::new();
    let shape = Shape::read(wasm);
    problems.extend(features::check(wasm, &shape.bodies));
    problems.extend(limits::check(wasm));
    check_exports(&shape, &mut problems);
    check_imports(&shape, &mut problems);
    if problems.is_empty() {
        Ok(ModuleFacts {
            uses_simd: features::uses_simd(wasm),
        })
    } else {
        Err(problems)
    }
}

fn not_a_module(wasm: &[u8]) -> Problem {
    let component = matches!(
        Parser::new(0).parse(wasm, true),
        Ok(wasmparser::Chunk::Parsed {
            payload: Payload::Version {
                encoding: Encoding::Component,
                ..
            },
            ..
        })
    );
    if component {
        Problem::new(
            "module.component",
            "module.wasm is a component, not a core module; ABI 1 runs WebAssembly core modules (wasm32-wasip1)",
        )
    } else {
        Problem::new(
            "module.invalid",
            "module.wasm is not a WebAssembly module (its header is wrong)",
        )
    }
}

/// A function type: parameters and results.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    params: Vec<ValType>,
    results: Vec<ValType>,
}

impl Signature {
    fn show(&self) -> String {
        fn list(types: &[ValType]) -> String {
            let names: Vec<String> = types.iter().map(ToString::to_string).collect();
            match names.len() {
                1 => names[0].clone(),
                _ => format!("({})", names.join(", ")),
            }
        }
        let params: Vec<String> = self.params.iter().map(ToString::to_string).collect();
        format!("({}) -> {}", params.join(", "), list(&self.results))
    }

    fn of_import(import: Import) -> Signature {
        let convert = |types: &[AbiType]| {
            types
                .iter()
                .map(|t| match t {
                    AbiType::I32 => ValType::I32,
                    AbiType::I64 => ValType::I64,
                })
                .collect()
        };
        Signature {
            params: convert(import.params()),
            results: convert(import.results()),
        }
    }
}

/// The parts of a module the import and export rules look at, read as far as the bytes allow
/// (an invalid module is reported by validation; its readable parts are still checked).
#[derive(Default)]
struct Shape<'a> {
    /// Per type index: the signature, or `None` for a non-function type.
    types: Vec<Option<Signature>>,
    /// Per function index (imports first): the type index.
    functions: Vec<u32>,
    imports: Vec<wasmparser::Import<'a>>,
    exports: Vec<wasmparser::Export<'a>>,
    bodies: Vec<FunctionBody<'a>>,
}

impl<'a> Shape<'a> {
    fn read(wasm: &'a [u8]) -> Shape<'a> {
        let mut shape = Shape::default();
        // A read error only cuts the shape short: validation reports it.
        let _ = shape.fill(wasm);
        shape
    }

    fn fill(&mut self, wasm: &'a [u8]) -> wasmparser::Result<()> {
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for sub in group?.into_types() {
                            self.types.push(match sub.composite_type.inner {
                                CompositeInnerType::Func(func) => Some(Signature {
                                    params: func.params().to_vec(),
                                    results: func.results().to_vec(),
                                }),
                                _ => None,
                            });
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import?;
                        if let TypeRef::Func(index) | TypeRef::FuncExact(index) = import.ty {
                            self.functions.push(index);
                        }
                        self.imports.push(import);
                    }
                }
                Payload::FunctionSection(reader) => {
                    for index in reader {
                        self.functions.push(index?);
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        self.exports.push(export?);
                    }
                }
                Payload::CodeSectionEntry(body) => self.bodies.push(body),
                _ => {}
            }
        }
        Ok(())
    }

    fn function_signature(&self, function: u32) -> Option<&Signature> {
        let type_index = *self.functions.get(function as usize)?;
        self.types.get(type_index as usize)?.as_ref()
    }
}

fn kind_name(kind: ExternalKind) -> &'static str {
    match kind {
        ExternalKind::Func | ExternalKind::FuncExact => "a function",
        ExternalKind::Table => "a table",
        ExternalKind::Memory => "a memory",
        ExternalKind::Global => "a global",
        ExternalKind::Tag => "a tag",
    }
}

fn check_exports(shape: &Shape, problems: &mut Vec<Problem>) {
    let find = |name: &str| shape.exports.iter().find(|export| export.name == name);
    match find("_start") {
        None => problems.push(Problem::new(
            "export.start",
            "the module does not export _start, a function taking and returning nothing",
        )),
        Some(export) if !matches!(export.kind, ExternalKind::Func | ExternalKind::FuncExact) => {
            problems.push(Problem::new(
                "export.start",
                format!(
                    "_start must be a function taking and returning nothing; the module exports {}",
                    kind_name(export.kind)
                ),
            ))
        }
        Some(export) => {
            let wanted = Signature {
                params: vec![],
                results: vec![],
            };
            match shape.function_signature(export.index) {
                Some(found) if *found == wanted => {}
                Some(found) => problems.push(Problem::new(
                    "export.start",
                    format!(
                        "_start must have type () -> (); the module declares {}",
                        found.show()
                    ),
                )),
                // Only an invalid module has no signature here, and validation said so.
                None => {}
            }
        }
    }
    match find("memory") {
        None => problems.push(Problem::new(
            "export.memory",
            "the module does not export its linear memory as memory",
        )),
        Some(export) if export.kind != ExternalKind::Memory => problems.push(Problem::new(
            "export.memory",
            format!(
                "the export memory must be a memory; the module exports {}",
                kind_name(export.kind)
            ),
        )),
        Some(_) => {}
    }
}

fn check_imports(shape: &Shape, problems: &mut Vec<Problem>) {
    for import in &shape.imports {
        let (module, name) = (import.module, import.name);
        if module != WASI_MODULE && module != HTTP_MODULE {
            problems.push(Problem::new(
                "import.unknown",
                format!(
                    "the import {module}.{name} comes from the module {module:?}, which ABI 1 does not provide (only {WASI_MODULE} and {HTTP_MODULE})"
                ),
            ));
            continue;
        }
        let type_index = match import.ty {
            TypeRef::Func(index) | TypeRef::FuncExact(index) => index,
            TypeRef::Table(_) | TypeRef::Memory(_) | TypeRef::Global(_) | TypeRef::Tag(_) => {
                let kind = match import.ty {
                    TypeRef::Table(_) => "a table",
                    TypeRef::Memory(_) => "a memory",
                    TypeRef::Global(_) => "a global",
                    _ => "a tag",
                };
                problems.push(Problem::new(
                    "import.kind",
                    format!(
                        "the import {module}.{name} is {kind}; ABI 1 modules import only functions (and export their own memory)"
                    ),
                ));
                continue;
            }
        };
        let Some(abi_import) = Import::lookup(module, name) else {
            problems.push(Problem::new(
                "import.unknown",
                format!("the import {module}.{name} is not a function {module} provides"),
            ));
            continue;
        };
        let expected = Signature::of_import(abi_import);
        match shape.types.get(type_index as usize) {
            Some(Some(declared)) if *declared == expected => {}
            Some(Some(declared)) => problems.push(Problem::new(
                "import.signature",
                format!(
                    "the import {module}.{name} expects {}, the module declares {}",
                    expected.show(),
                    declared.show()
                ),
            )),
            // A non-function type or a bad index: validation reports the module invalid.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;

    fn rules(wat: &str) -> Vec<&'static str> {
        let wasm = wat::parse_str(wat).unwrap();
        check_module(&wasm)
            .unwrap_err()
            .into_iter()
            .map(|p| p.rule)
            .collect()
    }

    fn messages(wat: &str) -> Vec<String> {
        let wasm = wat::parse_str(wat).unwrap();
        check_module(&wasm)
            .unwrap_err()
            .into_iter()
            .map(|p| p.message)
            .collect()
    }

    #[test]
    fn a_minimal_command_module_passes_without_simd() {
        let wasm = wat::parse_str(MINIMAL).unwrap();
        assert_eq!(check_module(&wasm), Ok(ModuleFacts { uses_simd: false }));
    }

    #[test]
    fn signatures_print_like_the_abi_text() {
        let sig = Signature::of_import(Import::ClockTimeGet);
        assert_eq!(sig.show(), "(i32, i64, i32) -> i32");
        assert_eq!(Signature::of_import(Import::ProcExit).show(), "(i32) -> ()");
    }

    #[test]
    fn every_abi_import_with_its_signature_passes() {
        let mut wat = String::from("(module\n");
        for import in Import::all() {
            let sig = Signature::of_import(import);
            let params: Vec<String> = sig.params.iter().map(ToString::to_string).collect();
            let results: Vec<String> = sig.results.iter().map(ToString::to_string).collect();
            wat.push_str(&format!(
                "(import {:?} {:?} (func (param {}) (result {})))\n",
                import.module(),
                import.name(),
                params.join(" "),
                results.join(" ")
            ));
        }
        wat.push_str(r#"(memory (export "memory") 1) (func (export "_start")))"#);
        let wasm = wat::parse_str(&wat).unwrap();
        assert_eq!(check_module(&wasm), Ok(ModuleFacts { uses_simd: false }));
    }

    #[test]
    fn a_wrong_signature_names_both_signatures() {
        let found = messages(
            r#"(module (import "subako_http" "request" (func (param i32) (result i32)))
                (memory (export "memory") 1) (func (export "_start")))"#,
        );
        assert_eq!(found.len(), 1);
        assert!(
            found[0].contains("expects (i32, i32) -> i32, the module declares (i32) -> i32"),
            "{found:?}"
        );
    }

    #[test]
    fn start_exported_as_a_global_and_memory_as_a_function_are_refused() {
        assert_eq!(
            rules(
                r#"(module (global (export "_start") i32 (i32.const 0))
                    (func (export "memory")))"#
            ),
            ["export.start", "export.memory"]
        );
    }

    #[test]
    fn garbage_bytes_are_not_a_module() {
        assert_eq!(
            check_module(b"not wasm").unwrap_err()[0].rule,
            "module.invalid"
        );
    }

    #[test]
    fn an_invalid_body_is_reported_with_the_export_problems() {
        assert_eq!(
            rules(r#"(module (func (result i32)))"#),
            ["module.invalid", "export.start", "export.memory"]
        );
    }
}
