//! Run permits: how many calls of one package compute at once (`hako serve --workers`, one
//! per core by default). A call takes one of its package's permits before it loads its module
//! and instantiates, gives it up while a host call waits ([`RunGate`]: a sleep, the broker's
//! answer) and takes it again after, and gives it back with its answer. A package's calls that
//! find every permit taken wait their turn in order of arrival, each package in a line of its
//! own: one package's backlog never stands in front of another package's call.
//!
//! Permits are per package, not for the whole server, on purpose: the running calls of all
//! packages share the cores through the kernel's scheduler, which time-slices them, so a call
//! that computes until its limit holds back no other package's call for that long, and a
//! package with many calls gets no more of the cores than its permits' worth while others
//! compute too. What bounds the server as a whole is the bound on calls in flight
//! ([`super::calls`]).
//!
//! This file does not admit or refuse calls, and it does not run them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::sandbox::RunGate;

/// How many calls are in each state now (the server's gauges).
#[derive(Debug, Default)]
pub struct CallStates {
    /// Holding a run permit: computing.
    pub running: AtomicU64,
    /// In a host call that waits, holding no permit.
    pub waiting: AtomicU64,
    /// Waiting for a run permit.
    pub queued: AtomicU64,
}

/// Every package's run permits.
pub struct RunPermits {
    per_package: usize,
    packages: Mutex<HashMap<String, Arc<PackagePermits>>>,
    states: Arc<CallStates>,
}

impl RunPermits {
    /// `per_package` permits (at least one) for each package.
    pub fn new(per_package: usize) -> Self {
        Self {
            per_package: per_package.max(1),
            packages: Mutex::default(),
            states: Arc::default(),
        }
    }

    /// How many calls of one package compute at once.
    pub fn per_package(&self) -> usize {
        self.per_package
    }

    /// How many calls are running, waiting and queued now.
    pub fn states(&self) -> &Arc<CallStates> {
        &self.states
    }

    /// A handle for one call of `package`, holding no permit yet.
    pub fn for_call(&self, package: &str) -> Arc<CallPermit> {
        let permits = {
            let mut packages = lock(&self.packages);
            match packages.get(package) {
                Some(permits) => Arc::clone(permits),
                None => {
                    let permits = Arc::new(PackagePermits::new(self.per_package));
                    packages.insert(package.to_string(), Arc::clone(&permits));
                    permits
                }
            }
        };
        Arc::new(CallPermit {
            permits,
            states: Arc::clone(&self.states),
            held: AtomicBool::new(false),
            queued_us: AtomicU64::new(0),
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// One package's permits and its line of calls waiting for one.
struct PackagePermits {
    limit: usize,
    state: Mutex<Line>,
}

#[derive(Default)]
struct Line {
    held: usize,
    waiting: VecDeque<Arc<Turn>>,
}

/// A call's place in the line: a permit is handed to it directly when one is given back, so
/// the first in line is the next to run, and only it is woken.
#[derive(Default)]
struct Turn {
    granted: AtomicBool,
    wake: Condvar,
}

impl PackagePermits {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            state: Mutex::default(),
        }
    }

    /// Takes a permit, waiting in line for one until `until`; false when the time ran out
    /// first (no permit is held then).
    fn acquire(&self, until: Option<Instant>) -> bool {
        let mut line = lock(&self.state);
        if line.held < self.limit && line.waiting.is_empty() {
            line.held += 1;
            return true;
        }
        let turn = Arc::new(Turn::default());
        line.waiting.push_back(Arc::clone(&turn));
        loop {
            if turn.granted.load(Ordering::Acquire) {
                return true;
            }
            line = match until {
                None => turn.wake.wait(line).unwrap_or_else(|p| p.into_inner()),
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        line.waiting.retain(|waiting| !Arc::ptr_eq(waiting, &turn));
                        return false;
                    }
                    turn.wake
                        .wait_timeout(line, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    /// Gives a permit back: to the first call in line, if any.
    fn release(&self) {
        let mut line = lock(&self.state);
        match line.waiting.pop_front() {
            Some(next) => {
                next.granted.store(true, Ordering::Release);
                next.wake.notify_one();
            }
            None => line.held -= 1,
        }
    }
}

/// One call's hold on its package's permits, given up while its host calls wait.
pub struct CallPermit {
    permits: Arc<PackagePermits>,
    states: Arc<CallStates>,
    held: AtomicBool,
    queued_us: AtomicU64,
}

impl CallPermit {
    /// Takes a permit, waiting in line until `until` at most; false when the time ran out.
    pub fn acquire(&self, until: Option<Instant>) -> bool {
        if self.held.load(Ordering::Acquire) {
            return true;
        }
        let started = Instant::now();
        self.states.queued.fetch_add(1, Ordering::Relaxed);
        let got = self.permits.acquire(until);
        self.states.queued.fetch_sub(1, Ordering::Relaxed);
        self.queued_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if got {
            self.held.store(true, Ordering::Release);
            self.states.running.fetch_add(1, Ordering::Relaxed);
        }
        got
    }

    /// Gives the permit back, if held.
    pub fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.states.running.fetch_sub(1, Ordering::Relaxed);
            self.permits.release();
        }
    }

    /// How long the call waited for a permit, in microseconds, all its waits together.
    pub fn queued_us(&self) -> u64 {
        self.queued_us.load(Ordering::Relaxed)
    }
}

impl RunGate for CallPermit {
    fn pause(&self) {
        self.states.waiting.fetch_add(1, Ordering::Relaxed);
        self.release();
    }

    fn resume(&self, deadline: Option<Instant>) {
        self.states.waiting.fetch_sub(1, Ordering::Relaxed);
        // A call whose time ran out in line goes on without a permit only to end at its next
        // host call or check: the deadline has fired by then.
        self.acquire(deadline);
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn a_package_runs_at_most_its_permits_and_the_rest_wait_in_order() {
        let permits = RunPermits::new(1);
        let first = permits.for_call("a");
        assert!(first.acquire(None));
        let (order_tx, order) = channel();
        let waiters: Vec<_> = (0..3u64)
            .map(|n| {
                let call = permits.for_call("a");
                let order_tx = order_tx.clone();
                let waiter = std::thread::spawn(move || {
                    assert!(call.acquire(None));
                    order_tx.send(n).unwrap();
                    call.release();
                });
                // Each is in line before the next comes.
                while permits.states().queued.load(Ordering::Relaxed) < n + 1 {
                    std::thread::yield_now();
                }
                waiter
            })
            .collect();
        assert_eq!(permits.states().running.load(Ordering::Relaxed), 1);
        first.release();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        let got: Vec<u64> = order.try_iter().collect();
        assert_eq!(got, [0, 1, 2], "in order of arrival");
        assert_eq!(permits.states().running.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn another_package_is_not_held_up_by_a_busy_one() {
        let permits = RunPermits::new(1);
        let busy = permits.for_call("busy");
        assert!(busy.acquire(None));
        let quick = permits.for_call("quick");
        assert!(
            quick.acquire(Some(Instant::now())),
            "its own permits are free"
        );
    }

    #[test]
    fn a_call_waiting_in_a_host_call_lends_its_permit_and_takes_it_back() {
        let permits = RunPermits::new(1);
        let sleeper = permits.for_call("a");
        assert!(sleeper.acquire(None));
        sleeper.pause();
        assert_eq!(permits.states().waiting.load(Ordering::Relaxed), 1);
        let other = permits.for_call("a");
        assert!(other.acquire(Some(Instant::now())), "the permit is free");
        let other_done = std::thread::spawn({
            let other = Arc::clone(&other);
            move || {
                std::thread::sleep(Duration::from_millis(20));
                other.release();
            }
        });
        sleeper.resume(None);
        assert!(sleeper.held.load(Ordering::Relaxed));
        assert!(sleeper.queued_us() > 0);
        other_done.join().unwrap();
        assert_eq!(permits.states().waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_wait_in_line_ends_at_its_deadline_without_a_permit() {
        let permits = RunPermits::new(1);
        let holder = permits.for_call("a");
        assert!(holder.acquire(None));
        let late = permits.for_call("a");
        assert!(!late.acquire(Some(Instant::now() + Duration::from_millis(10))));
        assert_eq!(permits.states().queued.load(Ordering::Relaxed), 0);
        // Out of line: the holder's permit goes back to the package, not to the late call.
        holder.release();
        let next = permits.for_call("a");
        assert!(next.acquire(Some(Instant::now())));
    }

    #[test]
    fn a_dropped_call_gives_its_permit_back() {
        let permits = RunPermits::new(1);
        let call = permits.for_call("a");
        assert!(call.acquire(None));
        drop(call);
        assert!(permits.for_call("a").acquire(Some(Instant::now())));
    }
}
