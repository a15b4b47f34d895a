//! Modules that `wasm-smith` builds from any bytes, half of them shaped like an ABI 1
//! command. A file of its own, needing nothing of this crate, so that hako's hostile-guest
//! fuzzer (`tests/hostile_guests`) includes it too.

use arbitrary::Unstructured;
use hako_engine_api::Import;

/// The imports an ABI 1 module may have, as the module `wasm-smith` draws imports from.
fn abi_imports() -> Vec<u8> {
    let mut text = String::from("(module\n");
    for import in Import::all() {
        let list = |types: &[hako_engine_api::ValType]| {
            types
                .iter()
                .map(|t| match t {
                    hako_engine_api::ValType::I32 => " i32",
                    hako_engine_api::ValType::I64 => " i64",
                })
                .collect::<String>()
        };
        text.push_str(&format!(
            "  (import {:?} {:?} (func (param{}) (result{})))\n",
            import.module(),
            import.name(),
            list(import.params()),
            list(import.results())
        ));
    }
    text.push(')');
    wat::parse_str(&text).expect("the import table is valid text")
}

/// A module `wasm-smith` builds from `u`: with a configuration drawn from `u` too, and, when
/// `u` says so, shaped like an ABI 1 command (the ABI's imports only, `_start` and `memory`
/// exported, WebAssembly 2.0 features at most), so that accepted modules are reached as well.
pub fn smith_module(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let mut config: wasm_smith::Config = u.arbitrary()?;
    config.max_funcs = config.max_funcs.min(32);
    config.max_instructions = config.max_instructions.min(256);
    config.max_types = config.max_types.min(32);
    if u.arbitrary()? {
        config.available_imports = Some(abi_imports());
        config.exports = Some(
            wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "_start")))"#)
                .expect("the exports are valid text"),
        );
        config.threads_enabled = false;
        config.exceptions_enabled = false;
        config.tail_call_enabled = false;
        config.memory64_enabled = false;
        config.multi_value_enabled = true;
        config.max_memories = 1;
        config.relaxed_simd_enabled = false;
        config.gc_enabled = false;
        config.custom_page_sizes_enabled = false;
        config.wide_arithmetic_enabled = false;
        config.extended_const_enabled = false;
    }
    Ok(wasm_smith::Module::new(config, u)?.to_bytes())
}
