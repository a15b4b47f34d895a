//! A run's waits outside the guest: the one place where a host call that waits on something
//! else than the guest's own code (a `poll_oneoff` sleep, the broker's answer to
//! `subako_http.request`) gives up what the run holds to compute, and takes it back after.
//!
//! What a run holds is its [`RunGate`]'s business: a server lends each running call one of a
//! few run permits, so that a call that sleeps or waits on the network holds no core; a
//! command run alone has no gate and gives up nothing. [`Waits`] also counts how long the run
//! waited, for the call's figures.
//!
//! A run may also share its thread with other work: a server runs a call whose package's calls
//! have been quick on the front end's own thread, with no hand-off ([`RunGate::slice`]). Such
//! a run must not block that thread: at its first wait it is moved instead ([`Waits::moves`]),
//! before anything of the wait is done, and so it is once past its slice (the run's deadline
//! timer); the server runs it again from its start on a thread of its own.
//!
//! It does not decide what waits: the host calls that wait go through [`Waits::wait`], after
//! asking [`Waits::moves`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run gives up while one of its host calls waits, and takes back after.
pub trait RunGate: Send + Sync {
    /// A host call of the run is about to wait on something outside the guest.
    fn pause(&self);

    /// The wait is over: returns once the run may compute again, or at `deadline` when that
    /// comes first (the run is then past its time limit, and ends at its next host call or
    /// check).
    fn resume(&self, deadline: Option<Instant>);

    /// For a run that shares its thread with other work (a call the server runs on its front
    /// end's thread), how long it may compute there before it is moved to a thread of its own;
    /// it is moved at its first wait too. `None` (the default): the run has its thread to
    /// itself, and waits.
    fn slice(&self) -> Option<Duration> {
        None
    }

    /// The run is moved ([`RunGate::slice`]): it ends at once, and runs again from its start on
    /// a thread of its own. Called before the run has done anything outside itself that its
    /// second start would not do again: it has not waited, so it has sent nothing.
    fn move_off(&self) {}

    /// When the call's time limit began to count, if before this run: a moved call runs again
    /// with what is left of the limit its first start began. `None` (the default): at this
    /// run's start.
    fn began(&self) -> Option<Instant> {
        None
    }
}

/// One run's waits: its gate, if any, its deadline, and the time its host calls waited.
#[derive(Default)]
pub struct Waits {
    gate: Option<Arc<dyn RunGate>>,
    deadline: Option<Instant>,
    waited_us: AtomicU64,
}

impl Waits {
    /// The waits of a run that gives `gate` up while it waits, until `deadline`.
    pub fn new(gate: Option<Arc<dyn RunGate>>, deadline: Option<Instant>) -> Self {
        Self {
            gate,
            deadline,
            waited_us: AtomicU64::new(0),
        }
    }

    /// Runs `wait`, which waits on something outside the guest, with the run's gate given up.
    pub fn wait<T>(&self, wait: impl FnOnce() -> T) -> T {
        debug_assert!(
            self.slice().is_none(),
            "a run that shares its thread never waits: its host call asks Waits::moves first"
        );
        let started = Instant::now();
        let _paused = self
            .gate
            .as_deref()
            .map(|gate| Paused::new(gate, self.deadline));
        let value = wait();
        let waited = started.elapsed().as_micros() as u64;
        self.waited_us.fetch_add(waited, Ordering::Relaxed);
        value
    }

    /// Whether a host call about to wait must end the run instead, because the run shares its
    /// thread ([`RunGate::slice`]): the run is then moved ([`RunGate::move_off`]), and the host
    /// call ends it ([`crate::sandbox::Stop::Abort`]) before anything of the wait is done.
    pub fn moves(&self) -> bool {
        match &self.gate {
            Some(gate) if gate.slice().is_some() => {
                gate.move_off();
                true
            }
            _ => false,
        }
    }

    /// The run's slice on a shared thread, if it shares one ([`RunGate::slice`]).
    pub fn slice(&self) -> Option<Duration> {
        self.gate.as_ref().and_then(|gate| gate.slice())
    }

    /// Gives the gate up and takes it back at once (`sched_yield`): calls waiting for what the
    /// run holds go first. A run that shares its thread gives nothing up: it holds the thread
    /// for its slice at most, and the calls in line cannot run on it meanwhile.
    pub fn yield_now(&self) {
        if let Some(gate) = self.gate.as_ref().filter(|gate| gate.slice().is_none()) {
            drop(Paused::new(gate.as_ref(), self.deadline));
        }
    }

    /// How long the run's host calls waited, in microseconds.
    pub fn waited_us(&self) -> u64 {
        self.waited_us.load(Ordering::Relaxed)
    }
}

/// The gate given up; taken back when dropped, also when the wait unwinds.
struct Paused<'a> {
    gate: &'a dyn RunGate,
    deadline: Option<Instant>,
}

impl<'a> Paused<'a> {
    fn new(gate: &'a dyn RunGate, deadline: Option<Instant>) -> Self {
        gate.pause();
        Self { gate, deadline }
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.gate.resume(self.deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records what the run did with its gate.
    #[derive(Default)]
    struct Told(Mutex<Vec<&'static str>>);

    impl RunGate for Told {
        fn pause(&self) {
            self.0.lock().unwrap().push("pause");
        }
        fn resume(&self, _: Option<Instant>) {
            self.0.lock().unwrap().push("resume");
        }
    }

    #[test]
    fn a_wait_gives_the_gate_up_around_it_and_counts_its_time() {
        let told = Arc::new(Told::default());
        let waits = Waits::new(Some(told.clone() as Arc<dyn RunGate>), None);
        let value = waits.wait(|| {
            told.0.lock().unwrap().push("waiting");
            std::thread::sleep(std::time::Duration::from_millis(2));
            7
        });
        assert_eq!(value, 7);
        assert_eq!(*told.0.lock().unwrap(), ["pause", "waiting", "resume"]);
        assert!(waits.waited_us() >= 2_000, "{}", waits.waited_us());
        waits.yield_now();
        assert_eq!(told.0.lock().unwrap().len(), 5);
    }

    #[test]
    fn a_wait_that_unwinds_still_takes_the_gate_back() {
        let told = Arc::new(Told::default());
        let waits = Waits::new(Some(told.clone() as Arc<dyn RunGate>), None);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            waits.wait(|| panic!("on purpose"))
        }));
        assert!(unwound.is_err());
        assert_eq!(*told.0.lock().unwrap(), ["pause", "resume"]);
    }

    #[test]
    fn without_a_gate_a_wait_only_counts() {
        let waits = Waits::default();
        assert_eq!(waits.wait(|| 3), 3);
        waits.yield_now();
        assert!(!waits.moves());
    }

    /// A gate of a run that shares its thread.
    #[derive(Default)]
    struct Shared(Told);

    impl RunGate for Shared {
        fn pause(&self) {
            self.0.pause();
        }
        fn resume(&self, deadline: Option<Instant>) {
            self.0.resume(deadline);
        }
        fn slice(&self) -> Option<Duration> {
            Some(Duration::from_millis(10))
        }
        fn move_off(&self) {
            self.0 .0.lock().unwrap().push("moved");
        }
    }

    #[test]
    fn a_run_that_shares_its_thread_is_moved_instead_of_waiting_and_yields_nothing() {
        let shared = Arc::new(Shared::default());
        let waits = Waits::new(Some(shared.clone() as Arc<dyn RunGate>), None);
        assert_eq!(waits.slice(), Some(Duration::from_millis(10)));
        waits.yield_now();
        assert!(shared.0 .0.lock().unwrap().is_empty(), "nothing given up");
        assert!(waits.moves());
        assert_eq!(*shared.0 .0.lock().unwrap(), ["moved"]);
        let told = Arc::new(Told::default());
        let waits = Waits::new(Some(told.clone() as Arc<dyn RunGate>), None);
        assert!(!waits.moves(), "a run with a thread of its own waits");
        assert_eq!(waits.slice(), None);
        assert!(told.0.lock().unwrap().is_empty());
    }
}
