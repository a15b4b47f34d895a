//! The guest threads: a fixed number of OS threads that run calls (a call blocks its thread
//! from instantiation to the guest's exit), fed by one bounded queue. [`GuestPool::submit`]
//! either accepts a job — it will run, even when the server is shutting down — or refuses it at
//! once because the queue is full ([`Rejected::Busy`], which the front end answers 503 with
//! `Retry-After`) or closed. Nothing waits for room: there is no unbounded queue anywhere.
//!
//! The pool does not know what a call is; it runs closures and hands their value back on a
//! oneshot channel. A job that panics loses only its own answer (the receiver sees the
//! channel closed), never the thread. A job may leave one thing on its thread for the jobs
//! after it ([`keep`]), dropped when the thread stops.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Why a job was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The queue is full; try again shortly.
    #[error("every guest thread is busy and the queue is full")]
    Busy,
    /// The server is shutting down and takes no new calls.
    #[error("the server is shutting down")]
    Closed,
}

/// A fixed set of guest threads behind a bounded queue.
pub struct GuestPool {
    sender: Mutex<Option<SyncSender<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    threads: usize,
    queue: usize,
}

impl GuestPool {
    /// Starts `threads` guest threads (at least one) behind a queue of `queue` jobs (at least
    /// one). Each thread gets `stack_bytes` of stack: compiled guest code runs on it.
    pub fn new(threads: usize, queue: usize, stack_bytes: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let queue = queue.max(1);
        let (sender, receiver) = mpsc::sync_channel::<Job>(queue);
        let receiver = Arc::new(Mutex::new(receiver));
        let mut workers = Vec::with_capacity(threads);
        for index in 0..threads {
            let receiver = Arc::clone(&receiver);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("hako-guest-{index}"))
                    .stack_size(stack_bytes)
                    .spawn(move || work(&receiver))?,
            );
        }
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            workers: Mutex::new(workers),
            threads,
            queue,
        })
    }

    /// How many guest threads run calls.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How many accepted jobs may wait for a thread.
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// Queues `job`; its value arrives on the returned receiver once a thread has run it.
    pub fn submit<T, F>(&self, job: F) -> Result<oneshot::Receiver<T>, Rejected>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.submit_answer_first(move || (job(), ()))
    }

    /// Queues `job`, which returns its value and what is left of its work; the value is sent
    /// first, and what is left is dropped after, on the same thread, before it takes the next
    /// job (a call's instance and memory: their reset then does not delay the answer).
    pub fn submit_answer_first<T, L, F>(&self, job: F) -> Result<oneshot::Receiver<T>, Rejected>
    where
        T: Send + 'static,
        F: FnOnce() -> (T, L) + Send + 'static,
    {
        let (answer, receiver) = oneshot::channel();
        let boxed: Job = Box::new(move || {
            let (value, leftover) = job();
            // The submitter may have gone (a client that hung up); the call still ran.
            let _ = answer.send(value);
            drop(leftover);
        });
        let sender = self
            .sender
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let Some(sender) = sender.as_ref() else {
            return Err(Rejected::Closed);
        };
        match sender.try_send(boxed) {
            Ok(()) => Ok(receiver),
            Err(TrySendError::Full(_)) => Err(Rejected::Busy),
            Err(TrySendError::Disconnected(_)) => Err(Rejected::Closed),
        }
    }

    /// Takes no more jobs, lets the threads finish every accepted one, and waits for them.
    /// Blocking: call it off the async runtime.
    pub fn close_and_join(&self) {
        self.sender
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        let workers = std::mem::take(
            &mut *self
                .workers
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
        );
        for worker in workers {
            // A worker never panics: jobs run under catch_unwind.
            let _ = worker.join();
        }
    }
}

thread_local! {
    /// What a guest thread keeps from one job for the next ([`keep`]).
    static KEPT: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Keeps `value` on this guest thread for a later job to [`take_kept`], dropping what was kept
/// before. The thread drops it when it stops, before its own end (whatever is kept may need
/// the thread's other state to drop).
pub fn keep(value: Box<dyn Any>) {
    KEPT.with(|kept| kept.replace(Some(value)));
}

/// What this thread [kept](keep), taken.
pub fn take_kept() -> Option<Box<dyn Any>> {
    KEPT.with(|kept| kept.take())
}

fn work(receiver: &Mutex<Receiver<Job>>) {
    let _forget = ForgetKept;
    loop {
        let job = {
            let receiver = receiver.lock().unwrap_or_else(|poison| poison.into_inner());
            receiver.recv()
        };
        match job {
            Ok(job) => {
                if catch_unwind(AssertUnwindSafe(job)).is_err() {
                    tracing::error!("a call panicked on a guest thread; its answer is lost");
                }
            }
            // Closed and drained: every accepted job has run.
            Err(_) => return,
        }
    }
}

/// Drops what the thread kept when its loop ends (or unwinds).
struct ForgetKept;

impl Drop for ForgetKept {
    fn drop(&mut self) {
        drop(take_kept());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn a_submitted_job_runs_and_answers() {
        let pool = GuestPool::new(2, 4, 1 << 20).unwrap();
        let answer = pool.submit(|| 6 * 7).unwrap();
        assert_eq!(answer.blocking_recv().unwrap(), 42);
        pool.close_and_join();
    }

    /// Tells when it is dropped.
    struct Told(std::sync::mpsc::Sender<&'static str>, &'static str);

    impl Drop for Told {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }

    #[test]
    fn what_a_job_keeps_reaches_its_threads_next_job_and_goes_when_the_thread_stops() {
        let pool = GuestPool::new(1, 4, 1 << 20).unwrap();
        let (tell, dropped) = channel();
        let first = tell.clone();
        pool.submit(move || keep(Box::new(Told(first, "first"))))
            .unwrap()
            .blocking_recv()
            .unwrap();
        let taken = pool.submit(|| take_kept().map(|kept| kept.is::<Told>()));
        assert_eq!(taken.unwrap().blocking_recv().unwrap(), Some(true));
        assert_eq!(
            dropped.recv().unwrap(),
            "first",
            "taken, then dropped by the job"
        );
        let nothing = pool.submit(|| take_kept().is_none());
        assert!(nothing.unwrap().blocking_recv().unwrap(), "taken once");
        pool.submit(move || keep(Box::new(Told(tell, "last"))))
            .unwrap()
            .blocking_recv()
            .unwrap();
        assert!(dropped.try_recv().is_err(), "kept while the thread runs");
        pool.close_and_join();
        assert_eq!(
            dropped.recv().unwrap(),
            "last",
            "dropped as the thread stops"
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
        let pool = GuestPool::new(1, 4, 1 << 20).unwrap();
        let (release, gate) = channel::<()>();
        let answer = pool.submit_answer_first(move || (7, Gated(gate))).unwrap();
        // The leftover's drop waits for the release, which only follows the answer.
        assert_eq!(answer.blocking_recv().unwrap(), 7);
        let next = pool.submit(|| 8).unwrap();
        release.send(()).unwrap();
        // The thread drops the leftover before it takes the next job.
        assert_eq!(next.blocking_recv().unwrap(), 8);
        pool.close_and_join();
    }

    #[test]
    fn a_full_queue_refuses_at_once_and_accepted_jobs_still_run() {
        let pool = GuestPool::new(1, 1, 1 << 20).unwrap();
        let (release, gate) = channel::<()>();
        let (started_tx, started) = channel::<()>();
        let first = pool
            .submit(move || {
                started_tx.send(()).unwrap();
                gate.recv().unwrap();
                1
            })
            .unwrap();
        started.recv().unwrap(); // the only thread is now busy
        let second = pool.submit(|| 2).unwrap(); // fills the queue of one
        assert_eq!(pool.submit(|| 3).unwrap_err(), Rejected::Busy);
        release.send(()).unwrap();
        assert_eq!(first.blocking_recv().unwrap(), 1);
        assert_eq!(second.blocking_recv().unwrap(), 2);
        pool.close_and_join();
    }

    #[test]
    fn closing_drains_accepted_jobs_and_refuses_new_ones() {
        let pool = GuestPool::new(1, 8, 1 << 20).unwrap();
        let answers: Vec<_> = (0..5).map(|n| pool.submit(move || n).unwrap()).collect();
        pool.close_and_join();
        let got: Vec<i32> = answers
            .into_iter()
            .map(|answer| answer.blocking_recv().unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert_eq!(pool.submit(|| 9).unwrap_err(), Rejected::Closed);
    }

    #[test]
    fn a_panicking_job_loses_its_answer_but_not_the_thread() {
        let pool = GuestPool::new(1, 4, 1 << 20).unwrap();
        let lost = pool.submit(|| -> i32 { panic!("on purpose") }).unwrap();
        assert!(lost.blocking_recv().is_err());
        assert_eq!(pool.submit(|| 5).unwrap().blocking_recv().unwrap(), 5);
        pool.close_and_join();
    }
}
