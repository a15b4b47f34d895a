//! Which WebAssembly features a valid module needs beyond WebAssembly 2.0, named in words.
//!
//! The module is validated under exactly WebAssembly 2.0. While that fails, the feature the
//! failure needed is found — from the validator's own hint when it gives one, otherwise by
//! validating again with each refused feature added in turn — named, and added to the set, so
//! that a module needing several features gets one problem per feature. When the failure
//! points at an instruction, the problem names the instruction too, as
//! "uses tail calls (return_call), which ABI 1 does not allow".
//!
//! A module that is not valid even with every feature on is reported invalid instead.

use wasmparser::{FunctionBody, Validator, WasmFeatures};

use crate::package::Problem;

/// The features ABI 1 allows: WebAssembly 2.0 (which includes floats, mutable globals and
/// the reference types that need no garbage collector).
const ALLOWED: WasmFeatures = WasmFeatures::WASM2;

/// Every feature outside WebAssembly 2.0 that a core module can need, with its name.
const REFUSED: &[(WasmFeatures, &str)] = &[
    (WasmFeatures::THREADS, "threads and shared memory"),
    (
        WasmFeatures::SHARED_EVERYTHING_THREADS,
        "shared-everything threads",
    ),
    (WasmFeatures::LEGACY_EXCEPTIONS, "legacy exceptions"),
    (WasmFeatures::EXCEPTIONS, "exceptions"),
    (WasmFeatures::TAIL_CALL, "tail calls"),
    (WasmFeatures::MEMORY64, "memory64"),
    (WasmFeatures::MULTI_MEMORY, "multiple memories"),
    (WasmFeatures::RELAXED_SIMD, "relaxed SIMD"),
    (WasmFeatures::GC, "garbage collection"),
    (
        WasmFeatures::FUNCTION_REFERENCES,
        "typed function references",
    ),
    (
        WasmFeatures::EXTENDED_CONST,
        "extended constant expressions",
    ),
    (WasmFeatures::MEMORY_CONTROL, "memory control"),
    (WasmFeatures::STACK_SWITCHING, "stack switching"),
    (WasmFeatures::WIDE_ARITHMETIC, "wide arithmetic"),
    (WasmFeatures::CUSTOM_PAGE_SIZES, "custom page sizes"),
    (WasmFeatures::CUSTOM_DESCRIPTORS, "custom descriptors"),
    (WasmFeatures::COMPACT_IMPORTS, "compact imports"),
    (WasmFeatures::COMPONENT_MODEL, "the component model"),
];

/// Validates `wasm`: nothing when it is valid WebAssembly 2.0, one `module.invalid` problem
/// when it is not valid even with every feature on, and otherwise one problem per feature
/// outside WebAssembly 2.0 that it needs. `bodies` are the module's function bodies, to name
/// the instruction a failure points at.
pub(super) fn check(wasm: &[u8], bodies: &[FunctionBody]) -> Vec<Problem> {
    // Most modules are plain WebAssembly 2.0: one validation settles them.
    if validate(wasm, ALLOWED).is_ok() {
        return Vec::new();
    }
    match validate(wasm, WasmFeatures::all()) {
        Ok(()) => refused(wasm, bodies),
        Err(error) => vec![Problem::new(
            "module.invalid",
            format!("module.wasm is not valid WebAssembly: {error}"),
        )],
    }
}

/// One problem per feature outside WebAssembly 2.0 that `wasm`, valid with every feature on,
/// needs.
fn refused(wasm: &[u8], bodies: &[FunctionBody]) -> Vec<Problem> {
    let mut enabled = ALLOWED;
    let mut problems = Vec::new();
    // Each round enables one more feature, so this ends after at most one round per feature.
    for _ in 0..=REFUSED.len() {
        let error = match validate(wasm, enabled) {
            Ok(()) => return problems,
            Err(error) => error,
        };
        let Some((feature, name)) = needed_feature(wasm, enabled, &error) else {
            problems.push(Problem::new(
                "module.feature",
                format!(
                    "the module uses a feature outside WebAssembly 2.0, which ABI 1 does not allow: {error}"
                ),
            ));
            return problems;
        };
        let detail = instruction_at(bodies, error.offset())
            .unwrap_or_else(|| format!("{}, at offset {:#x}", error.message(), error.offset()));
        problems.push(Problem::new(
            "module.feature",
            format!("the module uses {name} ({detail}), which ABI 1 does not allow"),
        ));
        enabled |= feature;
    }
    problems
}

/// Whether a module valid under WebAssembly 2.0 uses 128-bit SIMD anywhere: exactly when it
/// stops being valid once SIMD is taken away.
pub(super) fn uses_simd(wasm: &[u8]) -> bool {
    validate(wasm, ALLOWED.difference(WasmFeatures::SIMD)).is_err()
}

fn validate(wasm: &[u8], features: WasmFeatures) -> wasmparser::Result<()> {
    Validator::new_with_features(features)
        .validate_all(wasm)
        .map(drop)
}

/// The refused feature `error` asked for, and its name.
fn needed_feature(
    wasm: &[u8],
    enabled: WasmFeatures,
    error: &wasmparser::BinaryReaderError,
) -> Option<(WasmFeatures, &'static str)> {
    let named = |wanted: WasmFeatures| {
        REFUSED
            .iter()
            .find(|(feature, _)| wanted.intersects(*feature) && !enabled.contains(*feature))
            .copied()
    };
    if let Some(found) = error.missing_wasm_feature().and_then(named) {
        return Some(found);
    }
    // No usable hint: the feature that lets validation pass, or at least get further.
    let candidates = REFUSED
        .iter()
        .filter(|(feature, _)| !enabled.contains(*feature));
    let mut further = None;
    for &(feature, name) in candidates {
        match validate(wasm, enabled | feature) {
            Ok(()) => return Some((feature, name)),
            Err(later) if later.offset() > error.offset() && further.is_none() => {
                further = Some((feature, name));
            }
            Err(_) => {}
        }
    }
    further
}

/// The name of the instruction at `offset`, if a function body has one there.
fn instruction_at(bodies: &[FunctionBody], offset: u64) -> Option<String> {
    let body = bodies.iter().find(|body| body.range().contains(&offset))?;
    let mut reader = body.get_operators_reader().ok()?;
    while !reader.eof() {
        let (operator, at) = reader.read_with_offset().ok()?;
        if at == offset {
            return Some(snake_case(&format!("{operator:?}")));
        }
        if at > offset {
            return None;
        }
    }
    None
}

/// `ReturnCall { function_index: 0 }` → `return_call`: the operator's variant name in the
/// lowercase, underscore-separated style of the text format's instruction names.
fn snake_case(debug: &str) -> String {
    let name = debug.split([' ', '{', '(']).next().unwrap_or(debug);
    let mut out = String::with_capacity(name.len() + 4);
    for (index, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if index > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(wat: &str) -> Vec<String> {
        let wasm = wat::parse_str(wat).unwrap();
        let bodies: Vec<FunctionBody> = wasmparser::Parser::new(0)
            .parse_all(&wasm)
            .filter_map(|payload| match payload.unwrap() {
                wasmparser::Payload::CodeSectionEntry(body) => Some(body),
                _ => None,
            })
            .collect();
        refused(&wasm, &bodies)
            .into_iter()
            .map(|p| p.message)
            .collect()
    }

    #[test]
    fn a_module_invalid_under_every_feature_is_reported_invalid() {
        let wasm = wat::parse_str("(module (func (result i32)))").unwrap();
        let found = check(&wasm, &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, "module.invalid");
        let plain = wat::parse_str("(module (func (drop (i32.const 1))))").unwrap();
        assert_eq!(check(&plain, &[]), Vec::new());
    }

    #[test]
    fn operator_names_become_instruction_names() {
        assert_eq!(
            snake_case("ReturnCall { function_index: 0 }"),
            "return_call"
        );
        assert_eq!(
            snake_case("I32x4RelaxedTruncF32x4S"),
            "i32x4_relaxed_trunc_f32x4_s"
        );
        assert_eq!(snake_case("Nop"), "nop");
    }

    #[test]
    fn a_tail_call_is_named_with_its_instruction() {
        assert_eq!(
            problems("(module (func $f (return_call $f)))"),
            ["the module uses tail calls (return_call), which ABI 1 does not allow"]
        );
    }

    #[test]
    fn each_needed_feature_is_reported_once() {
        let found = problems(
            r#"(module (memory 1 1 shared)
                (func $f (param i32) (result i32)
                  (i32.atomic.load (local.get 0)))
                (func $g (return_call $g)))"#,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("threads and shared memory"), "{found:?}");
        assert!(found[1].contains("tail calls (return_call)"), "{found:?}");
    }

    #[test]
    fn webassembly_2_features_are_not_refused() {
        let found = problems(
            r#"(module (memory 1) (table 1 funcref) (table 1 externref)
                (func (param i32) (result i32 i32)
                  (memory.fill (i32.const 0) (i32.const 0) (i32.const 0))
                  (i32.extend8_s (local.get 0))
                  (i32.trunc_sat_f32_s (f32.const 1))))"#,
        );
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn simd_is_detected_in_types_and_instructions() {
        let body = wat::parse_str("(module (func (drop (i8x16.splat (i32.const 1)))))").unwrap();
        let global = wat::parse_str("(module (global v128 (v128.const i64x2 0 0)))").unwrap();
        let plain = wat::parse_str("(module (func (drop (i32.const 1))))").unwrap();
        assert!(uses_simd(&body));
        assert!(uses_simd(&global));
        assert!(!uses_simd(&plain));
    }
}
