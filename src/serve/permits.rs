//! Run permits: how many calls of one package compute at once (`hako serve --workers`, one
//! per core by default). A call starts only with one of its package's permits, which it holds
//! while it loads its module, instantiates and runs, gives up while a host call waits
//! ([`RunGate`]: a sleep, the broker's answer) and takes again after, and gives back once its
//! answer is sent. A package's calls that find every permit taken wait their turn in order of
//! arrival, each package in a line of its own: one package's backlog never stands in front of
//! another package's call. A call in line that has not started holds no thread: a permit given
//! back starts it ([`Start`]), on the thread that gave it back when that one is done, so a
//! package's calls run one after another on one thread while they queue.
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

/// A call that has not started, waiting in its package's line: what sets it going on a thread
/// (it does not run the call itself, so it is quick to call under any lock-free caller), with
/// `true` when it is given a permit, or with `false` when its time ran out in line (the call
/// then only answers so).
pub type Start = Box<dyn FnOnce(bool) + Send>;

/// Where a call given to [`CallPermit::enter`] went.
pub enum Place {
    /// A permit was free: the call holds it, and is to be started now.
    Now(Start),
    /// The call waits in its package's line, until a permit comes or its deadline passes.
    InLine,
}

/// How often calls whose time ran out in line are looked for, while any waits there.
pub const SWEEP: std::time::Duration = std::time::Duration::from_millis(10);

/// The calls in line without a thread, for the sweep to know when to look.
#[derive(Default)]
struct InLine {
    count: Mutex<usize>,
    wake: Condvar,
    stop: AtomicBool,
}

impl InLine {
    fn add(&self, n: isize) {
        let mut count = lock(&self.count);
        *count = count.saturating_add_signed(n);
        if n > 0 {
            self.wake.notify_one();
        }
    }
}

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
    packages: Arc<Mutex<HashMap<String, Arc<PackagePermits>>>>,
    states: Arc<CallStates>,
    in_line: Arc<InLine>,
}

impl RunPermits {
    /// `per_package` permits (at least one) for each package, and a thread that answers the
    /// calls whose time runs out in line (every [`SWEEP`] while any waits there).
    pub fn new(per_package: usize) -> Self {
        let permits = Self {
            per_package: per_package.max(1),
            packages: Arc::default(),
            states: Arc::default(),
            in_line: Arc::default(),
        };
        let (packages, in_line) = (Arc::clone(&permits.packages), Arc::clone(&permits.in_line));
        let swept = std::thread::Builder::new()
            .name("hako-line-sweep".into())
            .spawn(move || sweep(&packages, &in_line));
        if let Err(err) = swept {
            tracing::error!(
                "no thread for the calls' lines ({err}): a call waits in line until a permit comes"
            );
        }
        permits
    }

    /// How many calls of one package compute at once.
    pub fn per_package(&self) -> usize {
        self.per_package
    }

    /// How many calls are running, waiting and queued now.
    pub fn states(&self) -> &Arc<CallStates> {
        &self.states
    }

    /// `package`'s permits and line, made on its first call; a served version keeps them, so
    /// that a call does not look them up by name.
    pub fn line(&self, package: &str) -> PackageLine {
        let mut packages = lock(&self.packages);
        if let Some(permits) = packages.get(package) {
            return PackageLine(Arc::clone(permits));
        }
        let permits = Arc::new(PackagePermits::new(
            self.per_package,
            Arc::clone(&self.in_line),
        ));
        packages.insert(package.to_string(), Arc::clone(&permits));
        PackageLine(permits)
    }

    /// A handle for one call of `package`, holding no permit yet.
    #[cfg(test)]
    pub fn for_call(&self, package: &str) -> Arc<CallPermit> {
        self.for_call_in(&self.line(package))
    }

    /// A handle for one call in `line`, holding no permit yet.
    pub fn for_call_in(&self, line: &PackageLine) -> Arc<CallPermit> {
        Arc::new(CallPermit {
            permits: Arc::clone(&line.0),
            states: Arc::clone(&self.states),
            held: AtomicBool::new(false),
            queued_us: AtomicU64::new(0),
        })
    }
}

/// One package's permits and line ([`RunPermits::line`]).
#[derive(Clone)]
pub struct PackageLine(Arc<PackagePermits>);

impl Drop for RunPermits {
    fn drop(&mut self) {
        self.in_line.stop.store(true, Ordering::Release);
        let _count = lock(&self.in_line.count);
        self.in_line.wake.notify_all();
    }
}

/// The sweep: while calls wait in line without a thread, every [`SWEEP`], those whose deadline
/// has passed are taken out and set going without a permit (they answer `timeout`).
fn sweep(packages: &Mutex<HashMap<String, Arc<PackagePermits>>>, in_line: &InLine) {
    loop {
        {
            let mut count = lock(&in_line.count);
            while *count == 0 && !in_line.stop.load(Ordering::Acquire) {
                count = in_line.wake.wait(count).unwrap_or_else(|p| p.into_inner());
            }
        }
        if in_line.stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(SWEEP);
        let lines: Vec<Arc<PackagePermits>> = lock(packages).values().cloned().collect();
        let now = Instant::now();
        for line in lines {
            for start in line.take_expired(now) {
                start(false);
            }
        }
    }
}

thread_local! {
    /// The calls given a permit on this thread while another such start runs here, in order.
    static STARTING: std::cell::RefCell<Option<VecDeque<Start>>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts `start` holding a permit. A start whose call cannot start after all (no thread for
/// it) gives its permit back at once, which starts the next call in line: so that a line of
/// such calls runs in a loop here rather than one inside the other down this thread's stack
/// (1,024 calls in line while no thread can be made would overflow it), a start made while
/// another one runs on this thread waits for it.
fn start_granted(start: Start) {
    let first = STARTING.with(|starting| {
        let mut starting = starting.borrow_mut();
        match starting.as_mut() {
            Some(later) => {
                later.push_back(start);
                None
            }
            None => {
                *starting = Some(VecDeque::new());
                Some(start)
            }
        }
    });
    let Some(mut start) = first else { return };
    /// Ends the loop's turn on this thread, even if a start panics.
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            STARTING.with(|starting| starting.borrow_mut().take());
        }
    }
    let _done = Done;
    loop {
        start(true);
        match STARTING.with(|starting| starting.borrow_mut().as_mut().and_then(VecDeque::pop_front))
        {
            Some(next) => start = next,
            None => break,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// One package's permits and its line of calls waiting for one.
struct PackagePermits {
    limit: usize,
    state: Mutex<Line>,
    in_line: Arc<InLine>,
}

#[derive(Default)]
struct Line {
    held: usize,
    waiting: VecDeque<Waiter>,
}

/// One place in a line.
enum Waiter {
    /// A call that started, waits on its thread to compute again.
    Resume(Arc<Turn>),
    /// A call that has not started, to answer `timeout` at `deadline`.
    Start { deadline: Instant, start: Start },
}

/// A call's place in the line: a permit is handed to it directly when one is given back, so
/// the first in line is the next to run, and only it is woken.
#[derive(Default)]
struct Turn {
    granted: AtomicBool,
    wake: Condvar,
}

impl PackagePermits {
    fn new(limit: usize, in_line: Arc<InLine>) -> Self {
        Self {
            limit,
            state: Mutex::default(),
            in_line,
        }
    }

    /// Gives `start` a permit if one is free and no call is in line before it, else puts it in
    /// line until `deadline`.
    fn enter(&self, start: Start, deadline: Instant) -> Place {
        let mut line = lock(&self.state);
        if line.held < self.limit && line.waiting.is_empty() {
            line.held += 1;
            return Place::Now(start);
        }
        line.waiting.push_back(Waiter::Start { deadline, start });
        drop(line);
        self.in_line.add(1);
        Place::InLine
    }

    /// Takes the calls whose deadline has passed by `now` out of line.
    fn take_expired(&self, now: Instant) -> Vec<Start> {
        let mut line = lock(&self.state);
        let is_expired =
            |waiter: &Waiter| matches!(waiter, Waiter::Start { deadline, .. } if *deadline <= now);
        // Most looks find nothing: the line is not rebuilt for them.
        if !line.waiting.iter().any(is_expired) {
            return Vec::new();
        }
        let mut expired = Vec::new();
        let mut kept = VecDeque::with_capacity(line.waiting.len());
        for waiter in line.waiting.drain(..) {
            match waiter {
                Waiter::Start { deadline, start } if deadline <= now => expired.push(start),
                other => kept.push_back(other),
            }
        }
        line.waiting = kept;
        drop(line);
        if !expired.is_empty() {
            self.in_line.add(-(expired.len() as isize));
        }
        expired
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
        line.waiting.push_back(Waiter::Resume(Arc::clone(&turn)));
        loop {
            if turn.granted.load(Ordering::Acquire) {
                return true;
            }
            line = match until {
                None => turn.wake.wait(line).unwrap_or_else(|p| p.into_inner()),
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        line.waiting.retain(|waiter| {
                            !matches!(waiter, Waiter::Resume(waiting) if Arc::ptr_eq(waiting, &turn))
                        });
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

    /// Gives a permit back: to the first call in line, if any; a call that has not started is
    /// handed back, holding the permit, for the caller to start.
    fn release(&self) -> Option<Start> {
        let mut line = lock(&self.state);
        match line.waiting.pop_front() {
            Some(Waiter::Resume(next)) => {
                next.granted.store(true, Ordering::Release);
                next.wake.notify_one();
                None
            }
            Some(Waiter::Start { start, .. }) => {
                drop(line);
                self.in_line.add(-1);
                Some(start)
            }
            None => {
                line.held -= 1;
                None
            }
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
    /// Gives the call (`start`, whose call begins with [`CallPermit::started`]) a permit now if
    /// one is free, or puts it in line until `deadline`. Once per call, before it has started.
    pub fn enter(&self, start: Start, deadline: Instant) -> Place {
        self.states.queued.fetch_add(1, Ordering::Relaxed);
        self.permits.enter(start, deadline)
    }

    /// The call has started, after `queued` in line, holding a permit when `granted`.
    pub fn started(&self, granted: bool, queued: std::time::Duration) {
        self.states.queued.fetch_sub(1, Ordering::Relaxed);
        self.queued_us
            .fetch_add(queued.as_micros() as u64, Ordering::Relaxed);
        if granted {
            self.held.store(true, Ordering::Release);
            self.states.running.fetch_add(1, Ordering::Relaxed);
        }
    }

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

    /// Gives the permit back, if held: to the next call in line, which, if it has not started,
    /// is set going now, holding it.
    pub fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.states.running.fetch_sub(1, Ordering::Relaxed);
            if let Some(next) = self.permits.release() {
                start_granted(next);
            }
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

    /// One permit for package `a`, taken by a call that entered and started; and a deadline
    /// an hour away.
    fn one_call_started() -> (RunPermits, Arc<CallPermit>, Instant) {
        let permits = RunPermits::new(1);
        let far = Instant::now() + Duration::from_secs(3600);
        let first = permits.for_call("a");
        let Place::Now(start) = first.enter(Box::new(|_| {}), far) else {
            panic!("a free permit is taken at once");
        };
        start(true);
        first.started(true, Duration::ZERO);
        (permits, first, far)
    }

    #[test]
    fn calls_that_have_not_started_wait_in_line_without_a_thread_and_start_in_order() {
        let (permits, first, far) = one_call_started();
        let (tell, told) = channel();
        let mut calls = Vec::new();
        for n in 0..3 {
            let tell = tell.clone();
            let call = permits.for_call("a");
            let start: Start = Box::new(move |granted| tell.send((n, granted)).unwrap());
            // The second may wait 50 ms.
            let deadline = if n == 1 {
                Instant::now() + Duration::from_millis(50)
            } else {
                far
            };
            assert!(matches!(call.enter(start, deadline), Place::InLine));
            calls.push(call);
        }
        assert_eq!(permits.states().queued.load(Ordering::Relaxed), 3);
        // The second's time runs out in line: the sweep sets it going without a permit, once.
        assert_eq!(told.recv().unwrap(), (1, false));
        // The permit given back sets the first in line going, holding it; and so on.
        first.release();
        assert_eq!(told.try_recv().unwrap(), (0, true));
        calls[0].started(true, Duration::ZERO);
        calls[0].release();
        assert_eq!(told.try_recv().unwrap(), (2, true));
        assert!(told.try_recv().is_err());
    }

    #[test]
    fn a_line_of_calls_that_cannot_start_is_started_in_a_loop_not_down_the_stack() {
        // Each call, once given the permit, gives it back at once (as one whose thread could
        // not be made does), which starts the next: 100,000 of them, nested, overflowed this
        // thread's stack.
        let (permits, first, far) = one_call_started();
        let started = Arc::new(AtomicU64::new(0));
        for _ in 0..100_000 {
            let call = permits.for_call("a");
            let (again, started) = (Arc::clone(&call), Arc::clone(&started));
            let start: Start = Box::new(move |granted| {
                again.started(granted, Duration::ZERO);
                started.fetch_add(1, Ordering::Relaxed);
                again.release();
            });
            assert!(matches!(call.enter(start, far), Place::InLine));
        }
        first.release();
        assert_eq!(started.load(Ordering::Relaxed), 100_000);
        assert_eq!(permits.states().running.load(Ordering::Relaxed), 0);
        assert_eq!(permits.states().queued.load(Ordering::Relaxed), 0);
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
