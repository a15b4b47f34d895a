//! The table of open SSE sessions: at most [`MAX_SESSIONS`] at once, each naming its package
//! and the outbox its stream reads answers from, under a random id; and the flag that ends
//! every stream when the server stops.
//!
//! What this file does not do: speak SSE or dispatch messages ([`super::sse`] does).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{mpsc, watch};

use super::ids::uuid_v4;

/// The most sessions open at once.
pub const MAX_SESSIONS: usize = 16;

/// How many answers may wait for a slow SSE reader before a `POST` waits in turn.
const OUTBOX: usize = 64;

/// The open sessions of a server.
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    stopping: watch::Sender<bool>,
}

/// One open session, as a `POST` finds it.
#[derive(Clone)]
pub struct Session {
    pub package: String,
    pub outbox: mpsc::Sender<Vec<u8>>,
}

/// A session just opened: its id, and the answers its stream is to send.
pub struct Opened {
    pub id: String,
    pub inbox: mpsc::Receiver<Vec<u8>>,
    pub stopping: watch::Receiver<bool>,
}

/// Why no session was opened.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotOpened {
    #[error("the server is stopping")]
    Stopping,
    #[error("{MAX_SESSIONS} sessions are open already")]
    Full,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            stopping: watch::channel(false).0,
        }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens a session for `package` under a new id, within the bound.
    pub fn open(&self, package: &str) -> Result<Opened, NotOpened> {
        if *self.stopping.borrow() {
            return Err(NotOpened::Stopping);
        }
        let mut open = self.lock();
        if open.len() >= MAX_SESSIONS {
            return Err(NotOpened::Full);
        }
        let (outbox, inbox) = mpsc::channel(OUTBOX);
        let id = uuid_v4();
        let session = Session {
            package: package.to_string(),
            outbox,
        };
        open.insert(id.clone(), session);
        Ok(Opened {
            id,
            inbox,
            stopping: self.stopping.subscribe(),
        })
    }

    /// The session `id`, while it is open.
    pub fn get(&self, id: &str) -> Option<Session> {
        self.lock().get(id).cloned()
    }

    /// Ends the session `id` (its stream is gone).
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Ends every session and refuses new ones: the server is stopping.
    pub fn close_all(&self) {
        self.stopping.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bounded_and_a_closed_one_frees_its_place() {
        let sessions = Sessions::default();
        let opened: Vec<Opened> = (0..MAX_SESSIONS)
            .map(|_| sessions.open("greet").unwrap())
            .collect();
        assert_eq!(sessions.open("greet").err(), Some(NotOpened::Full));
        assert_eq!(sessions.get(&opened[0].id).unwrap().package, "greet");
        sessions.close(&opened[0].id);
        assert!(sessions.get(&opened[0].id).is_none());
        assert!(sessions.open("greet").is_ok());
        sessions.close_all();
        assert_eq!(sessions.open("greet").err(), Some(NotOpened::Stopping));
    }
}
