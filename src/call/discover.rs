//! Discovery at upload: one run of the module with only `/package` mounted, no volume, no
//! network and 10 seconds; `server/discover` must offer revision 2026-07-28 and tools, then
//! `tools/list` is followed through `nextCursor` for up to 16 pages, and the tools must keep
//! every rule of the ABI. The module must exit 0 once stdin closes, like any call.
//!
//! It does not store what it learns (that is `store`), and the tool rules themselves live in
//! `package::tools`.

use std::sync::Arc;

use hako_engine_api::Module;
use simd_json::BorrowedValue;

use super::outcome::Crash;
use super::runner::{self, Limits, Mounts, Network, RunError, VolumeTmp};
use super::session::{Conversation, Next};
use crate::package::tools::{validate_tools, Tool, ToolRuleError};
use crate::protocol::{self, RequestId};

/// The most `tools/list` pages discovery follows.
pub const MAX_PAGES: usize = 16;

/// What discovery learned: the tools the package offers until its next version.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    pub tools: Vec<Tool>,
}

/// Why discovery refused a package.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("discovery crashed ({kind}): {message}", kind = crash.kind, message = crash.message)]
    Crashed { crash: Crash, stderr: String },
    #[error("server/discover: {0}")]
    Discover(String),
    #[error("tools/list: {0}")]
    ToolsList(String),
    #[error("tools/list: the module asked for more than {MAX_PAGES} pages")]
    TooManyPages,
    #[error("tool rules: {0}")]
    Rules(#[from] ToolRuleError),
    #[error(transparent)]
    Run(#[from] RunError),
}

enum Stage {
    Discover,
    List { pages: usize },
}

struct DiscoveryConversation {
    stage: Stage,
    tools: Vec<serde_json::Value>,
    refusal: Option<DiscoveryError>,
}

impl DiscoveryConversation {
    fn list(&mut self, pages: usize, cursor: Option<&str>) -> Next {
        self.stage = Stage::List { pages };
        let id = RequestId::fresh("tools-list");
        let line = protocol::tools_list_line(&id, cursor);
        Next::Request(id, line)
    }

    /// Ends the conversation with a refusal; the guest still has to exit cleanly.
    fn refuse(&mut self, refusal: DiscoveryError) -> Next {
        self.refusal = Some(refusal);
        Next::Done
    }
}

impl Conversation for DiscoveryConversation {
    fn first(&mut self) -> (RequestId, Vec<u8>) {
        let id = RequestId::fresh("discover");
        let line = protocol::discover_line(&id);
        (id, line)
    }

    fn answered(&mut self, result: &BorrowedValue<'_>) -> Result<Next, Crash> {
        Ok(match self.stage {
            Stage::Discover => match protocol::discover_result(result) {
                Ok(()) => self.list(0, None),
                Err(err) => self.refuse(DiscoveryError::Discover(err.to_string())),
            },
            Stage::List { pages } => match protocol::tools_list_page(result) {
                Err(err) => self.refuse(DiscoveryError::ToolsList(err.to_string())),
                Ok((tools, next)) => {
                    self.tools.extend(tools);
                    let pages = pages + 1;
                    match next {
                        None => Next::Done,
                        Some(_) if pages >= MAX_PAGES => self.refuse(DiscoveryError::TooManyPages),
                        Some(cursor) => self.list(pages, Some(&cursor)),
                    }
                }
            },
        })
    }
}

/// Runs discovery on `module`, whose package mounts `assets` as `/package`.
pub fn discover(
    module: &Arc<dyn Module>,
    program: &str,
    assets: Option<std::path::PathBuf>,
) -> Result<Discovery, DiscoveryError> {
    let mounts = Mounts {
        volume_tmp: VolumeTmp::None,
        data: None,
        package_assets: assets,
        skills: Vec::new(),
    };
    let network = Network {
        policy: Arc::new(crate::http::PackagePolicy::default()),
        broker: Arc::new(crate::http::NoBroker),
    };
    let conversation = DiscoveryConversation {
        stage: Stage::Discover,
        tools: Vec::new(),
        refusal: None,
    };
    let ran = runner::run(
        runner::Instance::Fresh(module),
        program,
        Limits::DISCOVERY,
        &mounts,
        &network,
        None,
        conversation,
    )?;
    if let Some(crash) = ran.crash.clone() {
        return Err(DiscoveryError::Crashed {
            crash,
            stderr: ran.session.stderr_tail(),
        });
    }
    let conversation = ran.session.into_conversation();
    if let Some(refusal) = conversation.refusal {
        return Err(refusal);
    }
    let tools = validate_tools(conversation.tools)?;
    Ok(Discovery { tools })
}
