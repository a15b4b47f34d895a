//! The call the engine benches measure: the bundled greet example's tool, end to end through the
//! call contract, with no network.

use std::hint::black_box;
use std::sync::Arc;

use hako::call::{self, CallOutcome, CallStats, Limits, Mounts, Network, ToolRequest};
use hako::http::{NoBroker, PackagePolicy};
use hako_engine_api::Module;

/// The greet example's module, as committed.
pub fn wasm() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/greet/module.wasm"
    ))
    .expect("the greet example is committed")
}

/// A network that allows nothing: greet makes no request.
pub fn network() -> Network {
    Network {
        policy: Arc::new(PackagePolicy::default()),
        broker: Arc::new(NoBroker),
    }
}

/// One call of greet's tool on `module`, which must answer.
pub fn greet(module: &Arc<dyn Module>, network: &Network) {
    let outcome = call::call_tool(
        module,
        ToolRequest {
            program: "greet",
            tool: "greet",
            arguments: Arc::new(serde_json::json!({"name": "Ada"})),
            limits: Limits::CALL,
            mounts: Mounts::fresh(None),
            network: network.clone(),
            gate: None,
        },
        CallStats::default(),
    )
    .expect("the call runs");
    assert!(
        matches!(outcome, CallOutcome::Answered { .. }),
        "{outcome:?}"
    );
    black_box(outcome);
}
