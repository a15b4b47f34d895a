//! Deadlines for every running call, kept by one timer thread for the whole process (not a
//! thread per call). When a call's deadline passes, the timer sets the call's [`Cancel`] flag
//! (waking a guest blocked in a host call) and interrupts its guest code through the engine's
//! [`Interrupt`]; it keeps interrupting every few milliseconds until the call lets go of its
//! [`CallTimer`], because an interrupt that arrives while the guest is between host code and
//! guest code can be lost. This file does not decide what a fired deadline means for the
//! outcome; it only remembers which deadline fired.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use hako_engine_api::{Interrupt, Watchdog};

use crate::sandbox::Cancel;

/// How often a fired deadline interrupts its guest again until the call ends.
const REINTERRUPT_EVERY: Duration = Duration::from_millis(5);

/// The longest the timer sleeps while any call is registered. Waking it is two context
/// switches; with this tick, a call whose deadline falls after the timer's next wake-up (the
/// usual case: a call's limit is seconds away, and so is the exit grace of a call that has
/// answered) never needs to wake it, so a busy server wakes the timer about once per tick
/// instead of twice per call.
const TICK: Duration = Duration::from_millis(10);

/// Which limit a fired deadline was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineKind {
    /// The call's own time limit.
    CallTimeout,
    /// The second the guest has to exit once stdin is closed.
    ExitAfterEof,
    /// The slice of a run that shares its thread ([`crate::sandbox::RunGate::slice`]): the run
    /// is moved to a thread of its own, not ended.
    Slice,
}

struct Entry {
    at: Instant,
    kind: DeadlineKind,
    fired: Option<DeadlineKind>,
    cancel: Arc<Cancel>,
    interrupt: Option<Arc<dyn Interrupt>>,
}

#[derive(Default)]
struct State {
    /// (when, call id) of every registered call, earliest first; kept exact (a call that
    /// ends or moves its deadline takes its pair out), so it never outgrows the calls.
    queue: BTreeSet<(Instant, u64)>,
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// When the sleeping timer wakes up by itself; `None` while it sleeps until woken.
    timer_wakes_at: Option<Instant>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

fn shared() -> &'static Arc<Shared> {
    static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
    SHARED.get_or_init(|| {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let timer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("hako-deadlines".into())
            .spawn(move || run_timer(&timer))
            .expect("the deadline thread must start: without it no call could be bounded");
        shared
    })
}

fn run_timer(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        match state.queue.first().copied() {
            None => {
                state.timer_wakes_at = None;
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            Some((at, _)) if at > now => {
                let sleep = (at - now).min(TICK);
                state.timer_wakes_at = Some(now + sleep);
                state = shared
                    .wake
                    .wait_timeout(state, sleep)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Some((at, id)) => {
                state.queue.remove(&(at, id));
                let Some(entry) = state.entries.get_mut(&id) else {
                    continue;
                };
                entry.fired.get_or_insert(entry.kind);
                entry.cancel.cancel();
                if let Some(interrupt) = &entry.interrupt {
                    interrupt.interrupt();
                }
                entry.at = now + REINTERRUPT_EVERY;
                let again = entry.at;
                state.queue.insert((again, id));
            }
        }
    }
}

/// Whether a deadline at `at` comes before the sleeping timer wakes up by itself: only then
/// must it be woken to sleep less.
fn needs_wake(state: &State, at: Instant) -> bool {
    state.timer_wakes_at.is_none_or(|wakes| at < wakes)
}

/// One call's registration with the timer; dropping it ends the call's deadlines.
pub struct CallTimer {
    id: u64,
    shared: Arc<Shared>,
}

impl CallTimer {
    /// Registers a call whose first deadline, of `kind`, is at `at`.
    pub fn start(at: Instant, kind: DeadlineKind, cancel: Arc<Cancel>) -> Self {
        let shared = Arc::clone(shared());
        let mut state = shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.entries.insert(
            id,
            Entry {
                at,
                kind,
                fired: None,
                cancel,
                interrupt: None,
            },
        );
        let wakes_timer = needs_wake(&state, at);
        state.queue.insert((at, id));
        drop(state);
        if wakes_timer {
            shared.wake.notify_one();
        }
        Self { id, shared }
    }

    /// Brings the deadline forward to `at` as a deadline of `kind`, unless the current one is
    /// earlier or has already fired.
    pub fn shorten(&self, at: Instant, kind: DeadlineKind) {
        let mut state = self.shared.lock();
        let Some(entry) = state.entries.get_mut(&self.id) else {
            return;
        };
        if entry.fired.is_some() || entry.at <= at {
            return;
        }
        let before = entry.at;
        entry.at = at;
        entry.kind = kind;
        state.queue.remove(&(before, self.id));
        let wakes_timer = needs_wake(&state, at);
        state.queue.insert((at, self.id));
        drop(state);
        if wakes_timer {
            self.shared.wake.notify_one();
        }
    }

    /// Which deadline fired, if one did.
    pub fn fired(&self) -> Option<DeadlineKind> {
        self.shared
            .lock()
            .entries
            .get(&self.id)
            .and_then(|entry| entry.fired)
    }
}

impl Watchdog for CallTimer {
    fn arm(&self, interrupt: Arc<dyn Interrupt>) {
        let mut state = self.shared.lock();
        if let Some(entry) = state.entries.get_mut(&self.id) {
            if entry.fired.is_some() {
                interrupt.interrupt();
            }
            entry.interrupt = Some(interrupt);
        }
    }
}

impl Drop for CallTimer {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(entry) = state.entries.remove(&self.id) {
            state.queue.remove(&(entry.at, self.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(AtomicUsize);

    impl Interrupt for Count {
        fn interrupt(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_passed_deadline_cancels_and_keeps_interrupting() {
        let cancel = Arc::new(Cancel::new());
        let timer = CallTimer::start(
            Instant::now(),
            DeadlineKind::CallTimeout,
            Arc::clone(&cancel),
        );
        let count = Arc::new(Count(AtomicUsize::new(0)));
        timer.arm(Arc::clone(&count) as Arc<dyn Interrupt>);
        assert!(cancel.sleep_until(Instant::now() + Duration::from_secs(60)));
        while count.0.load(Ordering::SeqCst) < 2 {
            std::thread::yield_now();
        }
        assert_eq!(timer.fired(), Some(DeadlineKind::CallTimeout));
    }

    #[test]
    fn a_shortened_deadline_fires_with_its_own_kind() {
        let cancel = Arc::new(Cancel::new());
        let timer = CallTimer::start(
            Instant::now() + Duration::from_secs(3600),
            DeadlineKind::CallTimeout,
            Arc::clone(&cancel),
        );
        timer.shorten(Instant::now(), DeadlineKind::ExitAfterEof);
        assert!(cancel.sleep_until(Instant::now() + Duration::from_secs(60)));
        assert_eq!(timer.fired(), Some(DeadlineKind::ExitAfterEof));
    }

    #[test]
    fn a_later_deadline_does_not_replace_an_earlier_one() {
        let cancel = Arc::new(Cancel::new());
        let timer = CallTimer::start(
            Instant::now(),
            DeadlineKind::CallTimeout,
            Arc::clone(&cancel),
        );
        timer.shorten(
            Instant::now() + Duration::from_secs(3600),
            DeadlineKind::ExitAfterEof,
        );
        assert!(cancel.sleep_until(Instant::now() + Duration::from_secs(60)));
        assert_eq!(timer.fired(), Some(DeadlineKind::CallTimeout));
    }

    #[test]
    fn an_ended_call_leaves_nothing_queued() {
        let cancel = Arc::new(Cancel::new());
        let far = Instant::now() + Duration::from_secs(3600);
        let timer = CallTimer::start(far, DeadlineKind::CallTimeout, cancel);
        timer.shorten(far - Duration::from_secs(1), DeadlineKind::ExitAfterEof);
        let id = timer.id;
        let shared = Arc::clone(&timer.shared);
        assert!(shared.lock().queue.iter().filter(|(_, i)| *i == id).count() == 1);
        drop(timer);
        assert!(shared.lock().queue.iter().all(|(_, i)| *i != id));
    }

    #[test]
    fn an_unexpired_deadline_has_not_fired() {
        let cancel = Arc::new(Cancel::new());
        let timer = CallTimer::start(
            Instant::now() + Duration::from_secs(3600),
            DeadlineKind::CallTimeout,
            cancel,
        );
        assert_eq!(timer.fired(), None);
    }
}
