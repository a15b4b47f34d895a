//! What every request handler shares: the configuration, the calls, the SSE sessions, the
//! bucket follower, and the bound on the bytes uploads hold at once.
//!
//! What this file does not do: handle requests ([`super::http`] routes them).

use std::sync::Arc;

use super::calls::Calls;
use super::config::ServeConfig;
use super::follow::Follower;
use super::hosts::Hosts;
use super::sessions::Sessions;

/// What every request handler shares.
pub struct Server {
    pub config: ServeConfig,
    pub calls: Arc<Calls>,
    pub sessions: Sessions,
    /// Uploads compile; one runs at a time.
    pub(super) uploads: tokio::sync::Mutex<()>,
    /// The bytes of upload bodies received or being received, over all uploads.
    pub upload_budget: UploadBudget,
    /// The bucket the store follows, if any.
    pub follower: Option<Arc<Follower>>,
    /// The names a request's `Host` may give.
    pub hosts: Hosts,
}

impl Server {
    /// A server listening on `bound` (the address it was given, its port resolved).
    pub fn new(
        config: ServeConfig,
        bound: std::net::SocketAddr,
        calls: Arc<Calls>,
        follower: Option<Arc<Follower>>,
    ) -> Self {
        Self {
            hosts: Hosts::new(bound.ip(), &config.allowed_hosts),
            upload_budget: UploadBudget::new(config.max_upload_in_flight),
            config,
            calls,
            sessions: Sessions::default(),
            uploads: tokio::sync::Mutex::new(()),
            follower,
        }
    }
}

/// A bound on the bytes that uploads hold at once (on disk, in the staging folder): each
/// reserves its declared length before its body is read, and gives it back when it is done.
pub struct UploadBudget {
    total: u64,
    left: std::sync::Mutex<u64>,
}

impl UploadBudget {
    pub fn new(total: u64) -> Self {
        Self {
            total,
            left: std::sync::Mutex::new(total),
        }
    }

    /// The bound, in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Reserves `bytes`, or `None` when fewer are left.
    pub fn reserve(&self, bytes: u64) -> Option<Reserved<'_>> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *left = left.checked_sub(bytes)?;
        Some(Reserved {
            budget: self,
            bytes,
        })
    }
}

/// Bytes reserved from an [`UploadBudget`], given back when dropped.
pub struct Reserved<'a> {
    budget: &'a UploadBudget,
    bytes: u64,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        *self.budget.left.lock().unwrap_or_else(|p| p.into_inner()) += self.bytes;
    }
}
