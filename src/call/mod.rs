//! One call of a tool: a fresh instance, the single `tools/call` request already waiting on
//! stdin, one answer, stdin closed, exit 0 within a second — then the CallToolResult turned
//! into what the model is shown, `volume:///` links read after the guest has exited.
//!
//! `call` owns the call contract; it does not load modules (that is `store`), implement WASI
//! (that is `sandbox`) or parse lines (that is `protocol`).

mod command;
mod deadline;
mod discover;
mod outcome;
mod runner;
mod session;

use std::sync::Arc;

pub use hako_engine_api::Teardown;
use hako_engine_api::{Module, Prepared};
use simd_json::BorrowedValue;

pub use command::{run_command, Command, CommandExit, Mount, OutputStream, StreamFailure, Streams};
pub use discover::{discover, Discovery, DiscoveryError};
pub use outcome::{CallOutcome, CallStats, Crash, CrashKind};
pub use runner::{Limits, Mounts, Network, RunError, VolumeTmp};
pub use session::{STDERR_TAIL, STDOUT_LIMIT};

use crate::protocol::{self, CallResult, RequestId, ResultError, ShownBlock};
use crate::sandbox::RunGate;
use session::{Conversation, Next};

/// The one request of a tool call, and its answer once given.
struct ToolCall {
    tool: String,
    arguments: Arc<serde_json::Value>,
    result: Option<CallResult>,
}

impl Conversation for ToolCall {
    fn first(&mut self) -> (RequestId, Vec<u8>) {
        let id = RequestId::fresh("call");
        let line = protocol::tools_call_line(&id, &self.tool, &self.arguments);
        (id, line)
    }

    fn answered(&mut self, result: &BorrowedValue<'_>) -> Result<Next, Crash> {
        match protocol::call_result(result) {
            Ok(result) => {
                self.result = Some(result);
                Ok(Next::Done)
            }
            Err(ResultError::BadResultType(message)) => {
                Err(Crash::new(CrashKind::BadResultType, message))
            }
            // The answer is a JSON-RPC result, but not a CallToolResult: its result is of the
            // wrong type, which is what `bad_result_type` tells the operator.
            Err(ResultError::Invalid(message)) => Err(Crash::new(
                CrashKind::BadResultType,
                format!("the result is not a CallToolResult: {message}"),
            )),
        }
    }
}

/// A tool call to make.
pub struct ToolRequest<'a> {
    /// The name the guest sees as `argv[0]`.
    pub program: &'a str,
    pub tool: &'a str,
    /// The arguments, a JSON object: shared, so that a call run again (a server's call moved
    /// off its front-end thread) does not copy what its client sent.
    pub arguments: Arc<serde_json::Value>,
    pub limits: Limits,
    pub mounts: Mounts,
    pub network: Network,
    /// What the run gives up while its host calls wait (a server's run permit); none alone.
    pub gate: Option<Arc<dyn RunGate>>,
}

/// An instance of a module made ahead of its call ([`Module::prepare`]), in the background of
/// a server or a bench: no guest code has run in it, and it serves one call of that module
/// under the limits it was made for, then is dropped. It stays on the thread that made it.
pub struct ReadyInstance {
    module: Arc<dyn Module>,
    limits: Limits,
    prepared: Box<dyn Prepared>,
}

impl ReadyInstance {
    /// Instantiates `module` for a call under `limits`. An instantiation that fails is kept and
    /// reported by the call, as a call that instantiates for itself reports it.
    pub fn prepare(module: &Arc<dyn Module>, limits: Limits) -> Self {
        ReadyInstance {
            module: Arc::clone(module),
            limits,
            prepared: module.prepare(limits.run_limits()),
        }
    }

    /// Whether it can serve a call of `module` under `limits`: the same loaded module, and
    /// the same limits the engine enforces (the others are the host's, set by the call).
    pub fn serves(&self, module: &Arc<dyn Module>, limits: &Limits) -> bool {
        Arc::ptr_eq(&self.module, module) && self.limits.run_limits() == limits.run_limits()
    }
}

/// Calls a tool on a loaded module; `stats` comes back filled in with the run's figures.
pub fn call_tool(
    module: &Arc<dyn Module>,
    request: ToolRequest<'_>,
    stats: CallStats,
) -> Result<CallOutcome, RunError> {
    call_tool_answer_first(module, None, request, stats).map(|(outcome, teardown)| {
        teardown.finish();
        outcome
    })
}

/// [`call_tool`] on `ready`'s instance when it [serves](ReadyInstance::serves) the call (else
/// on an instance of its own, `ready` being dropped with the run's leftovers), handing back
/// what is left of the run (its instance and memory) for the caller to drop once it has sent
/// the answer (or the crash): a memory's reset then costs the caller's client no wait.
pub fn call_tool_answer_first(
    module: &Arc<dyn Module>,
    ready: Option<ReadyInstance>,
    request: ToolRequest<'_>,
    mut stats: CallStats,
) -> Result<(CallOutcome, Teardown), RunError> {
    let conversation = ToolCall {
        tool: request.tool.to_string(),
        arguments: request.arguments,
        result: None,
    };
    let (instance, unused) = match ready {
        Some(ready) if ready.serves(module, &request.limits) => {
            stats.ready = true;
            (runner::Instance::Made(ready.prepared), None)
        }
        other => (runner::Instance::Fresh(module), other),
    };
    let mut ran = runner::run(
        instance,
        request.program,
        request.limits,
        &request.mounts,
        &request.network,
        request.gate,
        conversation,
    )?;
    stats.run_us = ran.run_us;
    stats.wait_us = ran.wait_us;
    stats.memory_bytes = ran.memory_bytes;
    let teardown = match unused {
        Some(unused) => Teardown::new((std::mem::take(&mut ran.teardown), unused)),
        None => std::mem::take(&mut ran.teardown),
    };
    stats.stdout_bytes = ran.session.stdout_bytes();
    stats.stderr_bytes = ran.session.stderr_bytes();
    let stderr = ran.session.stderr_tail();
    if let Some(crash) = ran.crash.take() {
        return Ok((
            CallOutcome::Crashed {
                crash,
                stderr,
                stats,
            },
            teardown,
        ));
    }
    let mut result = take_result(&mut ran);
    for block in &mut result.content {
        if let ShownBlock::VolumeLink { path, .. } = block {
            *block = read_link(&ran, path);
        }
    }
    Ok((
        CallOutcome::Answered {
            result,
            stderr,
            stats,
        },
        teardown,
    ))
}

fn take_result(ran: &mut runner::Ran<ToolCall>) -> CallResult {
    // The runner reports no crash only when the conversation is done, and a ToolCall is done
    // only once it holds a result. Taken, not cloned: it may carry large inline images.
    ran.session
        .conversation_mut()
        .result
        .take()
        .expect("a finished tool call holds its result")
}

/// Reads a `volume:///` link after the guest exited: `path` is the decoded path under
/// `/volume`, such as `tmp/chart.png`.
fn read_link(ran: &runner::Ran<ToolCall>, path: &str) -> ShownBlock {
    let (first, rest) = path.split_once('/').unwrap_or((path, ""));
    match runner::volume_root(ran, first) {
        Some(root) if !rest.is_empty() => protocol::read_volume_link(&root, rest),
        _ => ShownBlock::Omitted {
            text: format!("volume:///{path} was left out: no such file in this call's volume"),
        },
    }
}
