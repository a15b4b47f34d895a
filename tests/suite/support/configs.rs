//! The engine configurations the tests run guests on: every one this build offers
//! ([`EngineConfig::all`]), or only those that `HAKO_TEST_ENGINES` names (configuration names
//! separated by commas, e.g. `wasmer-cranelift,wasmer-llvm`).
//!
//! CI's second x86-64 build (LLVM and the baselines) names LLVM and, as the reference its
//! answers are compared with, cranelift: singlepass, cranelift and wasmtime ran the same tests
//! in the default build, on the same code. A name this build does not offer is an error, never
//! a run on nothing. Shared by the suite (`support::host`, the WASI suite) and the hostile-guest
//! fuzzer, which includes this file.

use hako::engines::EngineConfig;

/// The variable that narrows the configurations.
pub const VARIABLE: &str = "HAKO_TEST_ENGINES";

/// The configurations to test, in [`EngineConfig::all`]'s order.
pub fn test_configs() -> Vec<EngineConfig> {
    narrowed(EngineConfig::all(), std::env::var(VARIABLE).ok().as_deref())
}

fn narrowed(all: Vec<EngineConfig>, names: Option<&str>) -> Vec<EngineConfig> {
    let Some(names) = names else { return all };
    let wanted: Vec<EngineConfig> = names
        .split(',')
        .map(|name| match name.trim().parse::<EngineConfig>() {
            Ok(config) if all.contains(&config) => config,
            Ok(config) => panic!("{VARIABLE} names {config}, which this build does not offer"),
            Err(err) => panic!("{VARIABLE} names {name:?}, not a configuration: {err}"),
        })
        .collect();
    all.into_iter()
        .filter(|config| wanted.contains(config))
        .collect()
}

// Named in full, with no imports: the hostile-guest fuzzer includes this file in a binary with
// no test harness, where nothing here would use them.
#[cfg(test)]
mod tests {
    #[test]
    fn without_the_variable_every_configuration_is_tested() {
        let all = super::EngineConfig::all();
        assert_eq!(super::narrowed(all.clone(), None), all);
    }

    #[test]
    fn the_variable_keeps_the_named_configurations_in_order() {
        let [singlepass, cranelift] = [
            hako::engines::Compiler::Singlepass,
            hako::engines::Compiler::Cranelift,
        ]
        .map(super::EngineConfig::wasmer);
        let kept = super::narrowed(
            vec![singlepass, cranelift],
            Some("wasmer-cranelift, wasmer-singlepass"),
        );
        assert_eq!(kept, [singlepass, cranelift]);
    }

    #[test]
    fn a_name_the_build_lacks_is_refused() {
        let all = vec![super::EngineConfig::wasmer(
            hako::engines::Compiler::Cranelift,
        )];
        let refused = std::panic::catch_unwind(|| super::narrowed(all, Some("wasmer-singlepass")));
        assert!(refused.is_err());
    }
}
