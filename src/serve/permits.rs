//! Run permits: how many calls compute at once. The server has `--workers` **run slots** (one
//! per core by default), and each package as many **permits**: a call starts only with one of
//! its package's permits and one of the server's slots, which it holds while it loads its
//! module, instantiates and runs, gives up while a host call waits ([`RunGate`]: a sleep, the
//! broker's answer) and takes again after, and gives back once its answer is sent.
//!
//! A call that cannot have both waits in its package's line, in order of arrival; a slot given
//! back goes to the packages with a call in line in turn (round robin over the packages whose
//! permits allow one more), so one package's backlog never stands in front of another
//! package's call, and packages with calls waiting share the slots evenly. A call in line that
//! has not started holds no thread: the thread that gives a slot back starts it ([`Start`]),
//! once done with its own call, so calls run one after another on few threads while they queue,
//! whichever packages they are of.
//!
//! A call that computes for longer than [`QUANTUM`] holding a slot stops counting against the
//! slots (it keeps its package's permit and goes on running, time-sliced by the kernel with the
//! rest), so a call that computes until its limit holds back another call for a quantum at most,
//! and the calls of one package compute on at most its permits' worth of threads. So quick calls
//! of many packages run back to back on the cores, as one package's do, rather than all at once
//! beside the front end's threads. What bounds the server as a whole is the bound on calls in
//! flight ([`super::calls`]).
//!
//! This file does not admit or refuse calls, and it does not run them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::sandbox::RunGate;

/// A call that has not started, waiting in its package's line: what sets it going on a thread
/// (it does not run the call itself, so it is quick to call under any lock-free caller), with
/// `true` when it is given a permit, or with `false` when its time ran out in line (the call
/// then only answers so).
pub type Start = Box<dyn FnOnce(bool) + Send>;

/// Where a call given to [`CallPermit::enter`] went.
pub enum Place {
    /// A permit and a slot were free: the call holds them, and is to be started now.
    Now(Start),
    /// The call waits in its package's line, until it is given both or its deadline passes.
    InLine,
}

/// How often calls whose time ran out in line, and calls past their quantum, are looked for,
/// while any call waits in line.
pub const SWEEP: Duration = Duration::from_millis(10);

/// How long a call computes holding a run slot before it stops counting against the slots.
pub const QUANTUM: Duration = Duration::from_millis(10);

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

/// The server's run slots and every package's permits and line.
pub struct RunPermits {
    board: Arc<Board>,
    packages: Mutex<HashMap<String, PackageLine>>,
    states: Arc<CallStates>,
}

impl RunPermits {
    /// `workers` run slots for the server and permits for each package (at least one), and a
    /// thread that answers the calls whose time runs out in line and takes slots back from
    /// calls past their quantum (every [`SWEEP`] while any call waits in line).
    pub fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        let permits = Self {
            board: Arc::new(Board {
                per_package: workers,
                slots: Mutex::new(Slots {
                    free: workers,
                    ..Slots::default()
                }),
                sweep: Condvar::new(),
                stop: AtomicBool::new(false),
            }),
            packages: Mutex::default(),
            states: Arc::default(),
        };
        let board = Arc::clone(&permits.board);
        let swept = std::thread::Builder::new()
            .name("hako-line-sweep".into())
            .spawn(move || board.sweep());
        if let Err(err) = swept {
            tracing::error!(
                "no thread for the calls' lines ({err}): a call waits in line until a permit comes"
            );
        }
        permits
    }

    /// How many calls of one package compute at once, and how many run slots the server has.
    pub fn per_package(&self) -> usize {
        self.board.per_package
    }

    /// How many calls are running, waiting and queued now.
    pub fn states(&self) -> &Arc<CallStates> {
        &self.states
    }

    /// `package`'s permits and line, made on its first call; a served version keeps them, so
    /// that a call does not look them up by name.
    pub fn line(&self, package: &str) -> PackageLine {
        let mut packages = lock(&self.packages);
        if let Some(line) = packages.get(package) {
            return line.clone();
        }
        let number = {
            let mut slots = lock(&self.board.slots);
            slots.lines.push(Line::default());
            slots.lines.len() - 1
        };
        let line = PackageLine(number);
        packages.insert(package.to_string(), line.clone());
        line
    }

    /// A handle for one call of `package`, holding no permit yet.
    #[cfg(test)]
    pub fn for_call(&self, package: &str) -> Arc<CallPermit> {
        self.for_call_in(&self.line(package))
    }

    /// A handle for one call in `line`, holding no permit yet.
    pub fn for_call_in(&self, line: &PackageLine) -> Arc<CallPermit> {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        Arc::new(CallPermit {
            board: Arc::clone(&self.board),
            line: line.0,
            call: CALLS.fetch_add(1, Ordering::Relaxed),
            states: Arc::clone(&self.states),
            held: AtomicBool::new(false),
            queued_us: AtomicU64::new(0),
            began: OnceLock::new(),
        })
    }
}

/// One package's place among the permits ([`RunPermits::line`]).
#[derive(Clone)]
pub struct PackageLine(usize);

impl Drop for RunPermits {
    fn drop(&mut self) {
        self.board.stop.store(true, Ordering::Release);
        let _slots = lock(&self.board.slots);
        self.board.sweep.notify_all();
    }
}

/// The slots, the lines, and what wakes the sweep.
struct Board {
    per_package: usize,
    slots: Mutex<Slots>,
    /// Wakes the sweep when a call gets in line while none was.
    sweep: Condvar,
    stop: AtomicBool,
}

impl Board {
    /// The sweep: while calls wait in line, every [`SWEEP`], those whose deadline has passed
    /// are taken out and set going without a permit (they answer `timeout`), and the slots of
    /// calls past their quantum go to calls in line.
    fn sweep(&self) {
        loop {
            {
                let mut slots = lock(&self.slots);
                while slots.in_line == 0 && !self.stop.load(Ordering::Acquire) {
                    slots = self.sweep.wait(slots).unwrap_or_else(|p| p.into_inner());
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(SWEEP);
            let now = Instant::now();
            let (expired, granted) = {
                let mut slots = lock(&self.slots);
                let expired = slots.take_expired(now);
                slots.end_quanta(now);
                (expired, slots.dispatch(self.per_package, now))
            };
            for start in expired {
                start(false);
            }
            for start in granted {
                start_granted(start);
            }
        }
    }
}

/// What the lock guards: the free slots, each package's line, the packages whose turn comes.
#[derive(Default)]
struct Slots {
    free: usize,
    /// Every package's line, by the number its [`PackageLine`] holds.
    lines: Vec<Line>,
    /// The packages with a call in line that their permits allow, each once, in turn.
    turns: VecDeque<usize>,
    /// The calls holding a slot, and since when.
    counted: Vec<(u64, Instant)>,
    /// Calls in line, every package together.
    in_line: usize,
}

/// One package's permits held and its line of calls waiting.
#[derive(Default)]
struct Line {
    held: usize,
    waiting: VecDeque<Waiter>,
    /// In [`Slots::turns`] now.
    has_turn: bool,
}

/// One place in a line.
enum Waiter {
    /// A call that started, waits on its thread to compute again.
    Resume { call: u64, turn: Arc<Turn> },
    /// A call that has not started, to answer `timeout` at `deadline`.
    Start {
        call: u64,
        deadline: Instant,
        start: Start,
    },
}

/// A call's place in the line: a permit is handed to it directly when one is given back, so
/// the first in line is the next to run, and only it is woken.
#[derive(Default)]
struct Turn {
    granted: AtomicBool,
    wake: Condvar,
}

impl Slots {
    /// Gives `call` of `line` a permit and a slot if both are free and no call of its package
    /// is in line before it. Where a slot is free, no package that can take one waits (each
    /// change below hands free slots out), so a call never passes another package's.
    fn take_now(&mut self, per_package: usize, line: usize, call: u64) -> bool {
        let line_ = &mut self.lines[line];
        if self.free == 0 || line_.held >= per_package || !line_.waiting.is_empty() {
            return false;
        }
        line_.held += 1;
        self.free -= 1;
        self.counted.push((call, Instant::now()));
        true
    }

    /// Puts `waiter` in `line`, and the package among those whose turn comes if its permits
    /// allow one more.
    fn queue(&mut self, per_package: usize, line: usize, waiter: Waiter) -> bool {
        let was_empty = self.in_line == 0;
        self.in_line += 1;
        let line_ = &mut self.lines[line];
        line_.waiting.push_back(waiter);
        if line_.held < per_package && !line_.has_turn {
            line_.has_turn = true;
            self.turns.push_back(line);
        }
        was_empty
    }

    /// `call` of `line` gives its permit back, and its slot if it still counts.
    fn give_back(&mut self, per_package: usize, line: usize, call: u64) {
        if let Some(at) = self
            .counted
            .iter()
            .position(|(counted, _)| *counted == call)
        {
            self.counted.swap_remove(at);
            self.free += 1;
        }
        let line_ = &mut self.lines[line];
        line_.held -= 1;
        if !line_.waiting.is_empty() && line_.held < per_package && !line_.has_turn {
            line_.has_turn = true;
            self.turns.push_back(line);
        }
    }

    /// Calls that have held their slot for a [`QUANTUM`] by `now` stop counting.
    fn end_quanta(&mut self, now: Instant) {
        let before = self.counted.len();
        self.counted
            .retain(|(_, since)| now.saturating_duration_since(*since) < QUANTUM);
        self.free += before - self.counted.len();
    }

    /// Hands the free slots to the calls in line, one package's first call at a time, in
    /// turn; wakes the calls that started and returns the ones that have not, to be started.
    fn dispatch(&mut self, per_package: usize, now: Instant) -> Vec<Start> {
        let mut starts = Vec::new();
        while self.free > 0 {
            let Some(number) = self.turns.pop_front() else {
                break;
            };
            let line = &mut self.lines[number];
            line.has_turn = false;
            if line.held >= per_package {
                continue;
            }
            let Some(waiter) = line.waiting.pop_front() else {
                continue;
            };
            line.held += 1;
            if !line.waiting.is_empty() && line.held < per_package {
                line.has_turn = true;
                self.turns.push_back(number);
            }
            self.free -= 1;
            self.in_line -= 1;
            match waiter {
                Waiter::Resume { call, turn } => {
                    self.counted.push((call, now));
                    turn.granted.store(true, Ordering::Release);
                    turn.wake.notify_one();
                }
                Waiter::Start { call, start, .. } => {
                    self.counted.push((call, now));
                    starts.push(start);
                }
            }
        }
        starts
    }

    /// Takes the calls that have not started and whose deadline has passed by `now` out of
    /// line.
    fn take_expired(&mut self, now: Instant) -> Vec<Start> {
        let is_expired =
            |waiter: &Waiter| matches!(waiter, Waiter::Start { deadline, .. } if *deadline <= now);
        let mut expired = Vec::new();
        for line in &mut self.lines {
            // Most looks find nothing: the line is not rebuilt for them.
            if !line.waiting.iter().any(is_expired) {
                continue;
            }
            let mut kept = VecDeque::with_capacity(line.waiting.len());
            for waiter in line.waiting.drain(..) {
                match waiter {
                    Waiter::Start {
                        deadline, start, ..
                    } if deadline <= now => expired.push(start),
                    other => kept.push_back(other),
                }
            }
            line.waiting = kept;
        }
        self.in_line -= expired.len();
        expired
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

/// One call's hold on a permit of its package and a slot, given up while its host calls wait.
pub struct CallPermit {
    board: Arc<Board>,
    line: usize,
    call: u64,
    states: Arc<CallStates>,
    held: AtomicBool,
    queued_us: AtomicU64,
    /// When the call's first run began, once it was moved off the front end's thread: its
    /// time limit counts from there ([`RunGate::began`]).
    began: OnceLock<Instant>,
}

impl CallPermit {
    /// Gives the call (`start`, whose call begins with [`CallPermit::started`]) a permit and a
    /// slot now if both are free, or puts it in line until `deadline`. Once per call, before it
    /// has started.
    pub fn enter(&self, start: Start, deadline: Instant) -> Place {
        self.states.queued.fetch_add(1, Ordering::Relaxed);
        let board = &self.board;
        let mut slots = lock(&board.slots);
        if slots.take_now(board.per_package, self.line, self.call) {
            return Place::Now(start);
        }
        let waiter = Waiter::Start {
            call: self.call,
            deadline,
            start,
        };
        if slots.queue(board.per_package, self.line, waiter) {
            board.sweep.notify_one();
        }
        Place::InLine
    }

    /// The call has started, after `queued` in line, holding a permit when `granted`.
    pub fn started(&self, granted: bool, queued: Duration) {
        self.states.queued.fetch_sub(1, Ordering::Relaxed);
        self.queued_us
            .fetch_add(queued.as_micros() as u64, Ordering::Relaxed);
        if granted {
            self.held.store(true, Ordering::Release);
            self.states.running.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes a permit and a slot, waiting in line until `until` at most; false when the time
    /// ran out first (nothing is held then).
    pub fn acquire(&self, until: Option<Instant>) -> bool {
        if self.held.load(Ordering::Acquire) {
            return true;
        }
        let started = Instant::now();
        self.states.queued.fetch_add(1, Ordering::Relaxed);
        let got = self.wait_in_line(until);
        self.states.queued.fetch_sub(1, Ordering::Relaxed);
        self.queued_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if got {
            self.held.store(true, Ordering::Release);
            self.states.running.fetch_add(1, Ordering::Relaxed);
        }
        got
    }

    fn wait_in_line(&self, until: Option<Instant>) -> bool {
        let board = &self.board;
        let mut slots = lock(&board.slots);
        if slots.take_now(board.per_package, self.line, self.call) {
            return true;
        }
        let turn = Arc::new(Turn::default());
        let waiter = Waiter::Resume {
            call: self.call,
            turn: Arc::clone(&turn),
        };
        if slots.queue(board.per_package, self.line, waiter) {
            board.sweep.notify_one();
        }
        loop {
            if turn.granted.load(Ordering::Acquire) {
                return true;
            }
            slots = match until {
                None => turn.wake.wait(slots).unwrap_or_else(|p| p.into_inner()),
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let line = &mut slots.lines[self.line];
                        let before = line.waiting.len();
                        line.waiting.retain(|waiter| {
                            !matches!(waiter, Waiter::Resume { turn: waiting, .. } if Arc::ptr_eq(waiting, &turn))
                        });
                        let gone = before - line.waiting.len();
                        slots.in_line -= gone;
                        return false;
                    }
                    turn.wake
                        .wait_timeout(slots, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    /// Gives the permit and the slot back, if held: to the calls in line, of which those that
    /// have not started are set going now, holding them.
    pub fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.states.running.fetch_sub(1, Ordering::Relaxed);
            let board = &self.board;
            let granted = {
                let mut slots = lock(&board.slots);
                slots.give_back(board.per_package, self.line, self.call);
                slots.dispatch(board.per_package, Instant::now())
            };
            for start in granted {
                start_granted(start);
            }
        }
    }

    /// How long the call waited for a permit, in microseconds, all its waits together.
    pub fn queued_us(&self) -> u64 {
        self.queued_us.load(Ordering::Relaxed)
    }

    /// The call's first run, which began at `began`, was moved: it runs again within what is
    /// left of its time limit.
    pub fn moved(&self, began: Instant) {
        let _ = self.began.set(began);
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

    fn began(&self) -> Option<Instant> {
        self.began.get().copied()
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
    fn a_call_past_its_quantum_lets_another_package_in_and_keeps_its_permit() {
        let permits = RunPermits::new(1);
        let busy = permits.for_call("busy");
        assert!(busy.acquire(None));
        let asked = Instant::now();
        let quick = permits.for_call("quick");
        assert!(
            quick.acquire(Some(asked + Duration::from_secs(10))),
            "the busy call's quantum ends"
        );
        assert!(asked.elapsed() >= QUANTUM, "{:?}", asked.elapsed());
        assert_eq!(permits.states().running.load(Ordering::Relaxed), 2);
        // The busy call still holds its package's one permit: another call of that package
        // waits, though no slot is counted against it.
        quick.release();
        let more = permits.for_call("busy");
        assert!(!more.acquire(Some(Instant::now() + 3 * SWEEP)));
        busy.release();
        assert!(more.acquire(Some(Instant::now())));
    }

    #[test]
    fn slots_go_to_the_packages_in_line_in_turn() {
        let permits = RunPermits::new(1);
        let far = Instant::now() + Duration::from_secs(3600);
        let first = permits.for_call("z");
        assert!(first.acquire(None));
        let (tell, told) = channel();
        let mut calls = HashMap::new();
        for name in ["a1", "a2", "a3", "b1", "b2", "c1"] {
            let call = permits.for_call(&name[..1]);
            let tell = tell.clone();
            let start: Start = Box::new(move |granted| tell.send((name, granted)).unwrap());
            assert!(matches!(call.enter(start, far), Place::InLine));
            calls.insert(name, call);
        }
        first.release();
        let mut order = Vec::new();
        while let Ok((name, granted)) = told.try_recv() {
            assert!(granted);
            order.push(name);
            let call = &calls[name];
            call.started(true, Duration::ZERO);
            call.release();
        }
        // Not in order of arrival (a1, a2, a3, b1, …): a package's backlog does not stand in
        // front of the others.
        assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "a3"]);
        assert_eq!(permits.states().running.load(Ordering::Relaxed), 0);
        assert_eq!(permits.states().queued.load(Ordering::Relaxed), 0);
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
