//! The call threads: every call in flight that is not run on the front end's thread (a quick
//! call, [`super::calls::SLICE`]) runs on an OS thread of its own, from the start of its call to
//! its answer, so that a call that waits (a sleep, the broker's answer) blocks only itself.
//! Threads are made as calls arrive and kept idle for the next ones: the most recently
//! idle thread takes the next call (it holds the instance its last call made ahead), a few
//! stay for good, and the others end after [`IDLE_FOR`] without work.
//!
//! Threads are not what bounds the server: calls are admitted before they get here (see
//! [`super::calls`]), and what computes at once is bounded by the run permits
//! ([`super::permits`]). [`CallThreads::dispatch`] either starts a job — it will run, even when
//! the server is shutting down, as every admitted call must — or refuses it at once
//! ([`Rejected`]) when the system would make no more threads.
//!
//! Lock order: a thread's state (`Shared::state`) before any mailbox's letter, everywhere.
//! An idle thread whose wait ran out lets its letter go before it takes the state, so that a
//! drain, which holds the state while it posts every idle mailbox a stop, cannot cross it.
//!
//! It does not know what a call is; it runs closures and hands their value back on a oneshot
//! channel. A job that panics loses only its own answer (the receiver sees the channel
//! closed), never the thread. A job may leave one thing on its thread for the jobs after it
//! ([`keep`]), dropped when the thread ends.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

/// A job, given what lists its thread as idle: a job calls it before it sends its answer, so
/// that the caller's next call finds the thread (and what its last call left there) even while
/// the thread still drops what the last call left.
pub struct Job(Box<Work>);

/// What a job does, given what lists its thread as idle.
type Work = dyn FnOnce(&dyn Fn()) + Send + 'static;

impl Job {
    /// A job that runs `work`, which returns its value and what is left of its work: the value
    /// is sent on `answer` first, and what is left is dropped after, on the same thread, before
    /// it takes another job (a call's instance and memory: their reset then does not delay the
    /// answer). The thread is listed as idle before the value is sent, so that what is left
    /// may hand the thread its next job (a call that gives back its run permit starts the
    /// next call in its package's line there, with no switch to another thread).
    pub fn answering<T, L, F>(answer: oneshot::Sender<T>, work: F) -> Job
    where
        T: Send + 'static,
        F: FnOnce() -> (T, L) + Send + 'static,
    {
        Job(Box::new(move |idle: &dyn Fn()| {
            match catch_unwind(AssertUnwindSafe(work)) {
                Ok((value, leftover)) => {
                    idle();
                    // The caller may have gone (a client that hung up); the call still ran.
                    let _ = answer.send(value);
                    drop(leftover);
                }
                Err(_) => {
                    tracing::error!("a call panicked on its thread; its answer is lost");
                    idle();
                    drop(answer);
                }
            }
        }))
    }
}

/// How long a thread past the ones kept for good waits for a call before it ends.
pub const IDLE_FOR: Duration = Duration::from_secs(10);

/// Why a job was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The server takes no more calls now: too many in flight, or no thread could be made.
    #[error("the server is at its bound of calls in flight")]
    Busy,
    /// The server is shutting down and takes no new calls.
    #[error("the server is shutting down")]
    Closed,
}

/// Threads that each run one call at a time, made as calls need them.
pub struct CallThreads {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Told when a thread ends.
    ended: Condvar,
    stack_bytes: usize,
    /// Idle threads kept for good.
    keep_idle: usize,
    /// How long a thread past those waits for a job before it ends ([`IDLE_FOR`]).
    idle_for: Duration,
}

#[derive(Default)]
struct State {
    /// Idle threads' mailboxes, the most recently idle last.
    idle: Vec<Arc<Mailbox>>,
    /// Threads alive.
    threads: usize,
    /// Threads ever made, for their names.
    made: u64,
    closed: bool,
}

/// Where an idle thread waits for its next job.
#[derive(Default)]
struct Mailbox {
    letter: Mutex<Letter>,
    wake: Condvar,
}

#[derive(Default)]
enum Letter {
    #[default]
    Empty,
    Job(Job),
    Stop,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl CallThreads {
    /// Call threads with `stack_bytes` of stack each (compiled guest code runs on them), of
    /// which `keep_idle` stay when idle.
    pub fn new(keep_idle: usize, stack_bytes: usize) -> Self {
        Self::idling(keep_idle, stack_bytes, IDLE_FOR)
    }

    /// Like [`CallThreads::new`], with threads past `keep_idle` ending after `idle_for`.
    fn idling(keep_idle: usize, stack_bytes: usize, idle_for: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                ended: Condvar::new(),
                stack_bytes,
                keep_idle,
                idle_for,
            }),
        }
    }

    /// Threads alive now, idle or not.
    pub fn threads(&self) -> usize {
        lock(&self.shared.state).threads
    }

    /// Starts `work` on a thread ([`Job::answering`]); its value arrives on the receiver.
    /// Refused once the threads are closing. (A server starts its calls through their
    /// package's line instead, with [`CallThreads::dispatch`].)
    #[cfg(test)]
    pub fn start<T, L, F>(&self, work: F) -> Result<oneshot::Receiver<T>, Rejected>
    where
        T: Send + 'static,
        F: FnOnce() -> (T, L) + Send + 'static,
    {
        if self.is_closed() {
            return Err(Rejected::Closed);
        }
        let (answer, receiver) = oneshot::channel();
        self.dispatch(Job::answering(answer, work))?;
        Ok(receiver)
    }

    /// Whether the threads are closing ([`CallThreads::close_and_join`]).
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.state).closed
    }

    /// Runs `job` on the most recently idle thread, or on a new one: also while closing, for a
    /// call admitted before (a closing server finishes every call it admitted). `Busy` when no
    /// thread could be made.
    pub fn dispatch(&self, job: Job) -> Result<(), Rejected> {
        let mut state = lock(&self.shared.state);
        if let Some(mailbox) = state.idle.pop() {
            drop(state);
            *lock(&mailbox.letter) = Letter::Job(job);
            mailbox.wake.notify_one();
            return Ok(());
        }
        state.threads += 1;
        state.made += 1;
        let name = format!("hako-call-{}", state.made);
        drop(state);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(name)
            .stack_size(self.shared.stack_bytes)
            .spawn(move || work(&shared, job));
        match spawned {
            Ok(_) => Ok(()),
            Err(err) => {
                tracing::warn!("no thread for a call: {err}");
                let mut state = lock(&self.shared.state);
                state.threads -= 1;
                self.shared.ended.notify_all();
                Err(Rejected::Busy)
            }
        }
    }

    /// Takes no more jobs, lets every started one finish, and waits for the threads to end.
    /// Blocking: call it off the async runtime.
    pub fn close_and_join(&self) {
        let mut state = lock(&self.shared.state);
        close(&mut state);
        drop(until_none_alive(&self.shared, state));
    }
}

/// Waits, with `state` let go meanwhile, until no thread is alive; hands the state back.
fn until_none_alive<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
) -> MutexGuard<'a, State> {
    while state.threads > 0 {
        state = shared
            .ended
            .wait(state)
            .unwrap_or_else(|poison| poison.into_inner());
    }
    state
}

/// Marks the threads closed and posts every idle one a stop, under the state's lock (taken
/// before each letter's: the module's lock order).
fn close(state: &mut State) {
    state.closed = true;
    for mailbox in state.idle.drain(..) {
        *lock(&mailbox.letter) = Letter::Stop;
        mailbox.wake.notify_one();
    }
}

thread_local! {
    /// What a call thread keeps from one job for the next ([`keep`]).
    static KEPT: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Keeps `value` on this call thread for a later job to [`take_kept`], dropping what was kept
/// before. The thread drops it when it ends, before its own end (whatever is kept may need the
/// thread's other state to drop).
pub fn keep(value: Box<dyn Any>) {
    KEPT.with(|kept| kept.replace(Some(value)));
}

/// What this thread [kept](keep), taken.
pub fn take_kept() -> Option<Box<dyn Any>> {
    KEPT.with(|kept| kept.take())
}

/// A thread's life: its first job, then each one its mailbox brings, until it is told to stop
/// or has been idle too long.
fn work(shared: &Shared, first: Job) {
    let _end = Ended(shared);
    let mailbox = Arc::new(Mailbox::default());
    let mut job = first;
    loop {
        // Whether the thread was listed as idle, once its job asked (or ended).
        let listed = std::cell::Cell::new(None);
        let list = || {
            if listed.get().is_none() {
                let mut state = lock(&shared.state);
                // A closing server lists no thread: this one ends after its job.
                if !state.closed {
                    state.idle.push(Arc::clone(&mailbox));
                }
                listed.set(Some(!state.closed));
            }
        };
        if catch_unwind(AssertUnwindSafe(|| (job.0)(&list))).is_err() {
            tracing::error!("what a call left panicked as it was dropped");
        }
        list();
        if listed.get() == Some(false) {
            return;
        }
        match wait_for_letter(shared, &mailbox) {
            Some(next) => job = next,
            None => return,
        }
    }
}

/// Waits in `mailbox` for the next job: `None` when told to stop, or when idle past
/// [`IDLE_FOR`] while more than the threads kept for good are alive.
fn wait_for_letter(shared: &Shared, mailbox: &Arc<Mailbox>) -> Option<Job> {
    let mut letter = lock(&mailbox.letter);
    loop {
        match std::mem::take(&mut *letter) {
            Letter::Job(job) => return Some(job),
            Letter::Stop => return None,
            Letter::Empty => {}
        }
        let (next, waited) = mailbox
            .wake
            .wait_timeout(letter, shared.idle_for)
            .unwrap_or_else(|poison| poison.into_inner());
        letter = next;
        if waited.timed_out() && matches!(*letter, Letter::Empty) {
            // The state is taken with the letter let go (the lock order): a drain holds the
            // state while it posts this mailbox its stop.
            drop(letter);
            if leave_if_still_idle(shared, mailbox) {
                return None;
            }
            // Taken from the list meanwhile: a job or a stop is on its way to this mailbox.
            letter = lock(&mailbox.letter);
        }
    }
}

/// Takes `mailbox` off the idle list and says so, when more than the threads kept for good are
/// alive and it is still listed: once taken from the list, a job is on its way to it.
fn leave_if_still_idle(shared: &Shared, mailbox: &Arc<Mailbox>) -> bool {
    let mut state = lock(&shared.state);
    if state.threads <= shared.keep_idle {
        return false;
    }
    match state.idle.iter().position(|m| Arc::ptr_eq(m, mailbox)) {
        Some(at) => {
            state.idle.remove(at);
            true
        }
        None => false,
    }
}

/// Counts the thread out when its life ends (or unwinds), after dropping what it kept.
struct Ended<'a>(&'a Shared);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        drop(take_kept());
        let mut state = lock(&self.0.state);
        state.threads -= 1;
        self.0.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Receiver};

    fn threads() -> CallThreads {
        CallThreads::new(1, 1 << 20)
    }

    fn answer_of<T: Send + 'static>(
        threads: &CallThreads,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        threads
            .start(move || (job(), ()))
            .unwrap()
            .blocking_recv()
            .unwrap()
    }

    #[test]
    fn a_started_job_runs_and_answers() {
        let threads = threads();
        assert_eq!(answer_of(&threads, || 6 * 7), 42);
        threads.close_and_join();
        assert_eq!(threads.threads(), 0);
    }

    #[test]
    fn jobs_that_wait_each_get_a_thread_of_their_own() {
        let threads = threads();
        let (release, gate) = channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let (started_tx, started) = channel::<()>();
        // Forty jobs that each wait until released: none waits for another to end.
        let answers: Vec<_> = (0..40)
            .map(|n| {
                let (gate, started_tx) = (Arc::clone(&gate), started_tx.clone());
                threads
                    .start(move || {
                        started_tx.send(()).unwrap();
                        lock(&gate).recv().unwrap();
                        (n, ())
                    })
                    .unwrap()
            })
            .collect();
        for _ in 0..40 {
            started.recv().unwrap();
        }
        assert_eq!(threads.threads(), 40);
        for _ in 0..40 {
            release.send(()).unwrap();
        }
        let mut got: Vec<i32> = answers
            .into_iter()
            .map(|a| a.blocking_recv().unwrap())
            .collect();
        got.sort();
        assert_eq!(got, (0..40).collect::<Vec<_>>());
        threads.close_and_join();
    }

    /// Tells when it is dropped.
    struct Told(std::sync::mpsc::Sender<&'static str>, &'static str);

    impl Drop for Told {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }

    #[test]
    fn what_a_job_keeps_reaches_the_next_job_of_its_idle_thread_and_goes_when_it_ends() {
        let threads = threads();
        let (tell, dropped) = channel();
        let first = tell.clone();
        answer_of(&threads, move || keep(Box::new(Told(first, "first"))));
        // The only thread is idle now: the next job runs on it.
        let taken = answer_of(&threads, || take_kept().map(|kept| kept.is::<Told>()));
        assert_eq!(taken, Some(true));
        assert_eq!(
            dropped.recv().unwrap(),
            "first",
            "taken, then dropped by the job"
        );
        assert!(answer_of(&threads, || take_kept().is_none()), "taken once");
        answer_of(&threads, move || keep(Box::new(Told(tell, "last"))));
        assert!(dropped.try_recv().is_err(), "kept while the thread lives");
        threads.close_and_join();
        assert_eq!(
            dropped.recv().unwrap(),
            "last",
            "dropped as the thread ends"
        );
    }

    /// Blocks its drop until the gate opens.
    struct Gated(Receiver<()>);

    impl Drop for Gated {
        fn drop(&mut self) {
            self.0.recv().unwrap();
        }
    }

    #[test]
    fn an_answer_is_sent_before_what_its_job_left_is_dropped() {
        let threads = threads();
        let (release, gate) = channel::<()>();
        let answer = threads.start(move || (7, Gated(gate))).unwrap();
        // The leftover's drop waits for the release, which only follows the answer.
        assert_eq!(answer.blocking_recv().unwrap(), 7);
        release.send(()).unwrap();
        threads.close_and_join();
    }

    #[test]
    fn closing_lets_started_jobs_finish_and_refuses_new_ones() {
        let threads = threads();
        let (release, gate) = channel::<()>();
        let running = threads
            .start(move || {
                gate.recv().unwrap();
                (1, ())
            })
            .unwrap();
        let closer = {
            let shared = Arc::clone(&threads.shared);
            std::thread::spawn(move || CallThreads { shared }.close_and_join())
        };
        // Closing waits for the running job; meanwhile nothing new starts.
        while !lock(&threads.shared.state).closed {
            std::thread::yield_now();
        }
        assert_eq!(threads.start(|| (9, ())).unwrap_err(), Rejected::Closed);
        release.send(()).unwrap();
        closer.join().unwrap();
        assert_eq!(running.blocking_recv().unwrap(), 1);
        assert_eq!(threads.threads(), 0);
    }

    /// The crossing that once hung a drain: a thread's idle wait runs out while the drain holds
    /// the state, then the drain posts each idle mailbox its stop. The thread must not hold its
    /// letter while it waits for the state.
    #[test]
    fn a_drain_holding_the_state_past_an_idle_wait_posts_its_stop_and_ends() {
        let idle_for = Duration::from_millis(100);
        let threads = CallThreads::idling(0, 1 << 20, idle_for);
        answer_of(&threads, || ());
        let (posted, done) = channel();
        let shared = Arc::clone(&threads.shared);
        let drain = std::thread::spawn(move || {
            let mut state = lock(&shared.state);
            // The thread listed itself idle before it answered, and waits for a job now.
            let idle = state.idle.len();
            // Held past the thread's idle wait: its wait runs out and it wants the state.
            std::thread::sleep(idle_for * 5);
            close(&mut state);
            posted.send(idle).unwrap();
        });
        let idle = done.recv_timeout(Duration::from_secs(30));
        assert_eq!(
            idle,
            Ok(1),
            "the drain could not post its stop: the idle thread held its letter"
        );
        drain.join().unwrap();
        threads.close_and_join();
        assert_eq!(threads.threads(), 0);
    }

    #[test]
    fn a_thread_past_those_kept_ends_after_its_idle_wait() {
        let threads = CallThreads::idling(0, 1 << 20, Duration::from_millis(5));
        answer_of(&threads, || ());
        // Ends on its own, without a drain: the count falls to zero.
        let state = until_none_alive(&threads.shared, lock(&threads.shared.state));
        assert!(state.idle.is_empty());
        assert!(!state.closed);
    }

    #[test]
    fn a_panicking_job_loses_its_answer_but_not_the_thread() {
        let threads = threads();
        let lost = threads
            .start(|| -> (i32, ()) { panic!("on purpose") })
            .unwrap();
        assert!(lost.blocking_recv().is_err());
        assert_eq!(answer_of(&threads, || 5), 5);
        assert_eq!(threads.threads(), 1);
        threads.close_and_join();
    }
}
