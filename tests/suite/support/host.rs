//! Running guests through hako's library in integration tests: a store shared by every test
//! process (so each engine configuration compiles the fixture once), every engine configuration
//! this build offers, and calls whose outcome tests compare across them.

use std::path::PathBuf;
use std::sync::Arc;

use hako::call::{self, CallOutcome, CallStats, CrashKind, Limits, Mounts, Network, ToolRequest};
use hako::engines::EngineConfig;
use hako::http::{Broker, NoBroker, PackagePolicy, Policy};
use hako::protocol::{CallResult, ShownBlock};
use hako::store::{ModuleSpec, Store};
use hako_engine_api::Module;
use serde_json::Value;

/// The engine configurations of this build (every wasmer compiler, and wasmtime when built
/// in; `HAKO_TEST_ENGINES` narrows them, see `support::configs`); every fixture runs on each.
/// This process compiles with LLVM itself (where the `hako` command starts its worker), so it
/// links LLVM first.
pub fn configs() -> Vec<EngineConfig> {
    hako_engine_llvm::link();
    super::configs::test_configs()
}

/// A store under the target folder, shared by all test processes: artifacts are content
/// addressed and written atomically, so sharing is safe and saves compiling.
pub fn shared_store() -> Store {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hako-test-store");
    Store::open(dir).expect("the shared test store opens")
}

/// `wasm` loaded for `config` from `store`, saying how.
pub fn load_in(store: &Store, config: EngineConfig, wasm: &[u8]) -> hako::store::Loaded {
    let sha = hako::store::sha256_hex(wasm);
    let uses_simd = hako::package::check_module(wasm)
        .map(|facts| facts.uses_simd)
        .unwrap_or(false);
    store
        .load_module(
            &ModuleSpec {
                wasm: hako::store::ModuleBytes::Given(wasm),
                module_sha256: &sha,
                uses_simd,
                config,
            },
            None,
        )
        .expect("the module loads")
}

/// `wasm` loaded for `config` from the shared store.
pub fn load(config: EngineConfig, wasm: &[u8]) -> Arc<dyn Module> {
    load_in(&shared_store(), config, wasm).module
}

/// A call to set up; `Call::new("greet").args(…).run(config)`.
pub struct Call {
    pub tool: String,
    pub arguments: Value,
    pub limits: Limits,
    pub mounts: Mounts,
    pub policy: PackagePolicy,
    pub broker: Arc<dyn Broker>,
    pub wasm: Option<Vec<u8>>,
}

impl Call {
    pub fn new(tool: &str) -> Self {
        Self {
            tool: tool.to_string(),
            arguments: serde_json::json!({}),
            limits: Limits::CALL,
            mounts: Mounts::fresh(None),
            policy: PackagePolicy::default(),
            broker: Arc::new(NoBroker),
            wasm: None,
        }
    }

    /// Sends HTTP through `broker` (default: `NoBroker`).
    pub fn broker(mut self, broker: Arc<dyn Broker>) -> Self {
        self.broker = broker;
        self
    }

    /// Runs under `policy`, the fixture's entry of a policy file.
    pub fn policy(mut self, policy: PackagePolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn args(mut self, arguments: Value) -> Self {
        self.arguments = arguments;
        self
    }

    pub fn limits(mut self, change: impl FnOnce(&mut Limits)) -> Self {
        change(&mut self.limits);
        self
    }

    pub fn mounts(mut self, change: impl FnOnce(&mut Mounts)) -> Self {
        change(&mut self.mounts);
        self
    }

    pub fn allow_hosts(mut self, hosts: &[&str]) -> Self {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        self.policy = Policy::empty()
            .for_package("fixture", &hosts)
            .expect("the hosts are valid allowlist entries");
        self
    }

    /// Runs another module than the fixture.
    pub fn module(mut self, wasm: Vec<u8>) -> Self {
        self.wasm = Some(wasm);
        self
    }

    pub fn run(&self, config: EngineConfig) -> CallOutcome {
        let wasm = self
            .wasm
            .as_deref()
            .unwrap_or_else(|| super::fixture_wasm());
        self.run_module(&load(config, wasm))
    }

    /// Runs on `module`, however it was loaded.
    pub fn run_module(&self, module: &Arc<dyn Module>) -> CallOutcome {
        call::call_tool(
            module,
            ToolRequest {
                program: "fixture",
                tool: &self.tool,
                arguments: Arc::new(self.arguments.clone()),
                limits: self.limits,
                mounts: self.mounts.clone(),
                network: Network {
                    policy: Arc::new(self.policy.clone()),
                    broker: Arc::clone(&self.broker),
                },
                gate: None,
            },
            CallStats::default(),
        )
        .expect("the host runs the call")
    }

    /// Runs on every engine configuration; returns the outcomes in `configs()` order.
    pub fn run_all(&self) -> Vec<(EngineConfig, CallOutcome)> {
        configs()
            .into_iter()
            .map(|config| (config, self.run(config)))
            .collect()
    }

    /// Runs on every engine configuration, asserts each crashed with `kind`, and returns the first crash
    /// message and stderr.
    pub fn crashes(&self, kind: CrashKind) -> (String, String) {
        let mut first = None;
        for (config, outcome) in self.run_all() {
            match outcome {
                CallOutcome::Crashed { crash, stderr, .. } => {
                    assert_eq!(
                        crash.kind, kind,
                        "{} on {config}: {}",
                        self.tool, crash.message
                    );
                    first.get_or_insert((crash.message, stderr));
                }
                CallOutcome::Answered { result, .. } => {
                    panic!(
                        "{} on {config} answered {result:?}, expected a {kind} crash",
                        self.tool
                    )
                }
            }
        }
        first.expect("at least one engine configuration is built in")
    }

    /// Runs on every engine configuration, asserts each answered the same result, and returns it.
    pub fn answers(&self) -> CallResult {
        let mut first: Option<CallResult> = None;
        for (config, outcome) in self.run_all() {
            match outcome {
                CallOutcome::Answered { result, .. } => match &first {
                    Some(seen) => {
                        assert_eq!(&result, seen, "{} differs on {config}", self.tool)
                    }
                    None => first = Some(result),
                },
                CallOutcome::Crashed { crash, stderr, .. } => panic!(
                    "{} on {config} crashed ({}): {}\nstderr: {stderr}",
                    self.tool, crash.kind, crash.message
                ),
            }
        }
        first.expect("at least one engine configuration is built in")
    }

    /// The answer's single text block, parsed as JSON.
    pub fn answer_json(&self) -> Value {
        let result = self.answers();
        match result.content.as_slice() {
            [ShownBlock::Text { text }] => serde_json::from_str(text).unwrap_or_else(|err| {
                panic!("{} answered non-JSON text {text:?}: {err}", self.tool)
            }),
            other => panic!("{} answered {other:?}, expected one text block", self.tool),
        }
    }
}

/// Runs `call` (whose time limit is `limit`) on every configuration and asserts each run ends
/// as a timeout, within `slack` of its limit: for guests that must be stopped by their
/// deadline, whatever they run.
pub fn ends_as_timeout(
    what: &str,
    call: &Call,
    limit: std::time::Duration,
    slack: std::time::Duration,
) {
    for config in configs() {
        let module = load(
            config,
            call.wasm.as_deref().expect("the call runs its own module"),
        );
        let started = std::time::Instant::now();
        let outcome = call.run_module(&module);
        let took = started.elapsed();
        match outcome {
            CallOutcome::Crashed { crash, .. } => {
                assert_eq!(
                    crash.kind,
                    CrashKind::Timeout,
                    "{what} on {config}: {crash:?}"
                )
            }
            CallOutcome::Answered { result, .. } => {
                panic!("{what} on {config} answered {result:?}")
            }
        }
        assert!(
            took < limit + slack,
            "{what} on {config} ran {took:?} against a limit of {limit:?}"
        );
    }
}
