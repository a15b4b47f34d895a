//! What a call comes to: the function answered (possibly with `isError`), or it crashed for
//! exactly one of the twelve reasons of the call contract, each with a stable `kind`. This
//! file names the kinds and shapes the outcome JSON of `hako call --json`; it does not decide
//! which kind a run earned (that is `call::session` and `call::runner`).

use serde::Serialize;

use crate::protocol::CallResult;

/// Why a call crashed. The `kind` strings are stable: operators alert on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashKind {
    /// The answer is a JSON-RPC error.
    JsonrpcError,
    /// `resultType` is present and not `complete`.
    BadResultType,
    /// A stdout line is not a JSON-RPC message.
    NotJsonrpc,
    /// It answers an id it was not asked.
    UnknownId,
    /// It sends a request of its own.
    GuestRequest,
    /// It exits before answering.
    ExitedBeforeAnswer,
    /// It exits with a status other than 0.
    NonzeroExit,
    /// It is still running 1 s after stdin closed.
    NoExitAfterEof,
    /// It traps.
    Trap,
    /// It hits the memory cap.
    OutOfMemory,
    /// The call's time limit runs out.
    Timeout,
    /// Stdout passes 1 MiB.
    StdoutLimit,
}

impl CrashKind {
    /// Every kind, in the order of the call contract's table.
    pub const ALL: [CrashKind; 12] = [
        CrashKind::JsonrpcError,
        CrashKind::BadResultType,
        CrashKind::NotJsonrpc,
        CrashKind::UnknownId,
        CrashKind::GuestRequest,
        CrashKind::ExitedBeforeAnswer,
        CrashKind::NonzeroExit,
        CrashKind::NoExitAfterEof,
        CrashKind::Trap,
        CrashKind::OutOfMemory,
        CrashKind::Timeout,
        CrashKind::StdoutLimit,
    ];

    /// The stable name, as in `{"kind": "…"}`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashKind::JsonrpcError => "jsonrpc_error",
            CrashKind::BadResultType => "bad_result_type",
            CrashKind::NotJsonrpc => "not_jsonrpc",
            CrashKind::UnknownId => "unknown_id",
            CrashKind::GuestRequest => "guest_request",
            CrashKind::ExitedBeforeAnswer => "exited_before_answer",
            CrashKind::NonzeroExit => "nonzero_exit",
            CrashKind::NoExitAfterEof => "no_exit_after_eof",
            CrashKind::Trap => "trap",
            CrashKind::OutOfMemory => "out_of_memory",
            CrashKind::Timeout => "timeout",
            CrashKind::StdoutLimit => "stdout_limit",
        }
    }
}

impl std::fmt::Display for CrashKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A crash: its kind and a message for the operator that says what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Crash {
    pub kind: CrashKind,
    pub message: String,
}

impl Crash {
    pub fn new(kind: CrashKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Figures of one call, for operators and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CallStats {
    /// Whether the module had to be compiled for this call (no cached artifact).
    pub compiled: bool,
    /// The engine that ran the code (`wasmer`, `wasmtime`).
    pub engine: String,
    /// The compiler that made the code that ran.
    pub compiler: String,
    /// Microseconds spent compiling or loading the module (0 when it was in memory).
    pub load_us: u64,
    /// Microseconds from instantiation (or, on an instance made ahead, from the start of the
    /// run) to the guest's exit.
    pub run_us: u64,
    /// Microseconds of `run_us` that the guest's host calls waited on something outside it
    /// (sleeps, the broker's answers).
    pub wait_us: u64,
    /// Microseconds the call waited for a run permit of its package, in a server (0 elsewhere).
    pub queue_us: u64,
    /// Whether the call ran on an instance made ahead of it ([`super::ReadyInstance`]).
    pub ready: bool,
    /// Bytes the guest wrote to stdout.
    pub stdout_bytes: u64,
    /// Bytes the guest wrote to stderr (only the last 4 KiB are kept).
    pub stderr_bytes: u64,
    /// The guest's linear memory at the end, in bytes.
    pub memory_bytes: u64,
}

/// How a call ended. It serializes as the outcome object of `hako call --json`: `outcome`
/// (`ok` or `crashed`) first, then the variant's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome")]
pub enum CallOutcome {
    /// The function answered; `result` is what the model is shown.
    #[serde(rename = "ok")]
    Answered {
        result: CallResult,
        stderr: String,
        stats: CallStats,
    },
    /// The function crashed; the model is told so, with the last 4 KiB of stderr.
    #[serde(rename = "crashed")]
    Crashed {
        crash: Crash,
        stderr: String,
        stats: CallStats,
    },
}

impl CallOutcome {
    /// The crash, if the call crashed.
    pub fn crash(&self) -> Option<&Crash> {
        match self {
            CallOutcome::Answered { .. } => None,
            CallOutcome::Crashed { crash, .. } => Some(crash),
        }
    }

    /// The figures of the call.
    pub fn stats(&self) -> &CallStats {
        match self {
            CallOutcome::Answered { stats, .. } | CallOutcome::Crashed { stats, .. } => stats,
        }
    }

    /// The call's figures, to fill in.
    pub fn stats_mut(&mut self) -> &mut CallStats {
        match self {
            CallOutcome::Answered { stats, .. } | CallOutcome::Crashed { stats, .. } => stats,
        }
    }

    /// The outcome object of `hako call --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("an outcome has only string keys")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_serializes_to_its_stable_name() {
        for kind in CrashKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::Value::String(kind.as_str().to_string())
            );
        }
    }

    #[test]
    fn a_crashed_outcome_names_its_kind_in_json() {
        let outcome = CallOutcome::Crashed {
            crash: Crash::new(CrashKind::NoExitAfterEof, "still running"),
            stderr: "tail".into(),
            stats: CallStats::default(),
        };
        let json = outcome.to_json();
        assert_eq!(json["outcome"], "crashed");
        assert_eq!(json["crash"]["kind"], "no_exit_after_eof");
        assert_eq!(json["stderr"], "tail");
    }

    #[test]
    fn the_outcome_written_as_bytes_is_the_outcome_object() {
        let stats = CallStats {
            engine: "wasmer".into(),
            run_us: 12,
            ..CallStats::default()
        };
        let answered = CallOutcome::Answered {
            result: CallResult {
                content: vec![crate::protocol::ShownBlock::Text { text: "hi".into() }],
                structured: Some(serde_json::json!({"message": "hi"})),
                is_error: false,
            },
            stderr: String::new(),
            stats: stats.clone(),
        };
        let crashed = CallOutcome::Crashed {
            crash: Crash::new(CrashKind::Trap, "unreachable"),
            stderr: "tail".into(),
            stats,
        };
        for outcome in [answered, crashed] {
            let bytes = serde_json::to_vec(&outcome).unwrap();
            assert!(bytes.starts_with(b"{\"outcome\":"), "outcome first");
            let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(parsed, outcome.to_json());
            assert_eq!(parsed["stats"]["run_us"], 12);
            let keys: Vec<&String> = parsed.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 4, "{keys:?}");
        }
    }
}
