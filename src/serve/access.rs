//! The access record: one line per call a server ran, at `info` under the target
//! `hako::access` (written where `HAKO_LOG` asks for it, e.g. `HAKO_LOG=info`;
//! `--log-format json` makes every line a JSON object). It names the package and version, the
//! tool, the front door and the caller's role, the call's number in this server and the
//! JSON-RPC id it came with, how it ended (`ok`, `is_error`, `crashed` with its kind, or
//! `host_error`), and where its time went: in its package's line for a run permit, running, and
//! waiting in host calls (sleeps, the broker's answers).
//!
//! It does not decide outcomes or time calls; it writes what it is given.

use std::time::Duration;

use crate::call::CallOutcome;

/// The front door a call came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `POST /v1/packages/NAME/call`.
    Api,
    /// MCP Streamable HTTP (`POST /mcp/NAME`).
    Mcp,
    /// The legacy HTTP+SSE transport (`/sse/NAME`, `/message`).
    Sse,
    /// `hako serve --stdio`.
    Stdio,
}

impl Door {
    pub fn name(self) -> &'static str {
        match self {
            Door::Api => "api",
            Door::Mcp => "mcp",
            Door::Sse => "sse",
            Door::Stdio => "stdio",
        }
    }
}

/// Where a call came from: its door, its caller's role (`anyone` where no token is set up,
/// `admin`, `agent`, `local` on stdio) and the JSON-RPC id it came with, if any.
#[derive(Debug, Clone)]
pub struct Origin {
    pub door: Door,
    pub caller: &'static str,
    pub rpc_id: Option<String>,
}

impl Origin {
    /// A call of the operator API by `caller`.
    pub fn api(caller: &'static str) -> Self {
        Self {
            door: Door::Api,
            caller,
            rpc_id: None,
        }
    }
}

/// What one call was and how it went.
pub struct Record<'a> {
    pub number: u64,
    pub origin: &'a Origin,
    pub package: &'a str,
    pub version: &'a str,
    pub tool: &'a str,
    /// `None`: a host failure.
    pub outcome: Option<&'a CallOutcome>,
    pub took: Duration,
}

impl Record<'_> {
    /// Writes the record.
    pub fn write(&self) {
        let (outcome, kind, stats) = match self.outcome {
            Some(CallOutcome::Answered { result, stats, .. }) => {
                let outcome = if result.is_error { "is_error" } else { "ok" };
                (outcome, None, Some(stats))
            }
            Some(CallOutcome::Crashed { crash, stats, .. }) => {
                ("crashed", Some(crash.kind.to_string()), Some(stats))
            }
            None => ("host_error", None, None),
        };
        // Milliseconds to the microsecond.
        let ms = |us: u64| us as f64 / 1000.0;
        let queued_ms = stats.map_or(0.0, |s| ms(s.queue_us));
        let run_ms = stats.map_or(0.0, |s| ms(s.load_us + s.run_us));
        let wait_ms = stats.map_or(0.0, |s| ms(s.wait_us));
        let total_ms = ms(self.took.as_micros() as u64);
        tracing::info!(
            target: "hako::access",
            call = self.number,
            package = self.package,
            version = self.version,
            tool = self.tool,
            door = self.origin.door.name(),
            caller = self.origin.caller,
            rpc_id = self.origin.rpc_id.as_deref(),
            outcome,
            kind = kind.as_deref(),
            queued_ms,
            run_ms,
            wait_ms,
            total_ms,
            "call"
        );
    }
}
