//! `poll_oneoff`: clock subscriptions sleep on the call's [`Cancel`](super::Cancel) (never past
//! the call's deadline), files and standard output are always ready, standard input is ready
//! when the caller's [`Stdio`] says so. A stdin that can become ready ([`Stdio::wait_stdin`],
//! `hako run`'s) is waited on with the clocks; a guest that would wait on a stdin that cannot,
//! and on nothing else, is handed to [`Stdio::stdin_would_block`]. It does not read or write
//! anything.

use super::error::errno::{EBADF, EINVAL, ENOTSUP};
use super::fdtable::Entry;
use super::memory;
use super::process;
use super::{Fail, Stdio, Wasi};
use hako_engine_api::Stop;
use rustix::time::ClockId;
use std::io::Seek;
use std::time::{Duration, Instant};

const SUBSCRIPTION_SIZE: u32 = 48;
const EVENT_SIZE: u32 = 32;
const EVENT_CLOCK: u8 = 0;
const EVENT_FD_READ: u8 = 1;
const EVENT_FD_WRITE: u8 = 2;
const ABSTIME: u16 = 1;
/// "Never", for a timeout too far away to represent.
const FAR_AWAY: Duration = Duration::from_secs(1 << 30);

/// One subscription, read from guest memory.
enum Subscription {
    Clock { id: u32, timeout: u64, flags: u16 },
    Fd { fd: u32, kind: u8 },
}

/// What a subscription is doing right now.
enum State {
    Ready { error: i32, nbytes: u64 },
    WakesAt(Instant),
    WaitsForStdin,
}

fn read_subscription(m: &[u8], at: u32) -> Result<(u64, Subscription), Fail> {
    let userdata = memory::read_u64(m, at)?;
    let tag = memory::bytes(m, at + 8, 1)?[0];
    let subscription = match tag {
        EVENT_CLOCK => Subscription::Clock {
            id: memory::read_u32(m, at + 16)?,
            timeout: memory::read_u64(m, at + 24)?,
            flags: memory::read_u16(m, at + 40)?,
        },
        EVENT_FD_READ | EVENT_FD_WRITE => Subscription::Fd {
            fd: memory::read_u32(m, at + 16)?,
            kind: tag,
        },
        _ => return Err(Fail::Errno(EINVAL)),
    };
    Ok((userdata, subscription))
}

/// When a clock subscription fires, measured from `now`.
fn wakeup(id: u32, timeout: u64, flags: u16, now: Instant) -> Result<Instant, i32> {
    let clock = match process::clock(id) {
        Ok(clock @ (ClockId::Realtime | ClockId::Monotonic)) => clock,
        Ok(_) => return Err(ENOTSUP),
        Err(_) => return Err(EINVAL),
    };
    let delay = if flags & ABSTIME != 0 {
        timeout.saturating_sub(process::now(clock))
    } else {
        timeout
    };
    Ok(now
        .checked_add(Duration::from_nanos(delay))
        .unwrap_or(now + FAR_AWAY))
}

fn write_event(
    m: &mut [u8],
    at: u32,
    userdata: u64,
    error: i32,
    kind: u8,
    nbytes: u64,
) -> Result<(), Fail> {
    let mut event = [0u8; 32];
    event[0..8].copy_from_slice(&userdata.to_le_bytes());
    event[8..10].copy_from_slice(&(error as u16).to_le_bytes());
    event[10] = kind;
    event[16..24].copy_from_slice(&nbytes.to_le_bytes());
    memory::write(m, at, &event)
}

impl<S: Stdio> Wasi<S> {
    pub(super) fn poll_oneoff(
        &mut self,
        m: &mut [u8],
        in_ptr: u32,
        out_ptr: u32,
        count: u32,
        nevents_ptr: u32,
    ) -> Result<(), Fail> {
        if count == 0 {
            return Err(Fail::Errno(EINVAL));
        }
        let fault = Fail::Errno(super::errno::EFAULT);
        memory::range(
            m,
            in_ptr,
            count.checked_mul(SUBSCRIPTION_SIZE).ok_or(fault)?,
        )?;
        memory::range(m, out_ptr, count.checked_mul(EVENT_SIZE).ok_or(fault)?)?;
        memory::range(m, nevents_ptr, 4)?;
        let start = Instant::now();

        let mut events = self.ready_events(m, in_ptr, out_ptr, count, start, None)?;
        while events.written == 0 && events.stdin_waits {
            let until = match (events.earliest, self.deadline) {
                (Some(wakeup), Some(deadline)) => Some(wakeup.min(deadline)),
                (wakeup, deadline) => wakeup.or(deadline),
            };
            if !self.stdio.wait_stdin(until)? {
                break;
            }
            if self.cancel.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Fail::Stop(Stop::Abort));
            }
            events = self.ready_events(m, in_ptr, out_ptr, count, start, Some(Instant::now()))?;
        }
        if events.written == 0 {
            match events.earliest {
                Some(wakeup) => {
                    // A run that shares its thread does not sleep on it: it is moved.
                    if self.waits.moves() {
                        return Err(Fail::Stop(Stop::Abort));
                    }
                    let until = self
                        .deadline
                        .map_or(wakeup, |deadline| deadline.min(wakeup));
                    let cancel = &self.cancel;
                    if self.waits.wait(|| cancel.sleep_until(until)) || until < wakeup {
                        // Cancelled, or the call's time ran out before the clock: the run is
                        // over either way.
                        return Err(Fail::Stop(Stop::Abort));
                    }
                    events =
                        self.ready_events(m, in_ptr, out_ptr, count, start, Some(Instant::now()))?;
                }
                None if events.stdin_waits => {
                    return Err(Fail::Stop(self.stdio.stdin_would_block()));
                }
                None => {}
            }
        }
        memory::write_u32(m, nevents_ptr, events.written)
    }

    /// Writes an event for every subscription ready now (or, after a sleep, at `woke`), and
    /// says when the earliest pending clock fires.
    fn ready_events(
        &mut self,
        m: &mut [u8],
        in_ptr: u32,
        out_ptr: u32,
        count: u32,
        start: Instant,
        woke: Option<Instant>,
    ) -> Result<Events, Fail> {
        let now = woke.unwrap_or(start);
        let mut events = Events {
            written: 0,
            earliest: None,
            stdin_waits: false,
        };
        for index in 0..count {
            // A guest may pass millions of subscriptions, each of a file costing a system call.
            if (index as usize).is_multiple_of(super::PIECE_ITEMS) {
                self.go_on()?;
            }
            let (userdata, subscription) =
                read_subscription(m, in_ptr + index * SUBSCRIPTION_SIZE)?;
            let (kind, state) = match subscription {
                Subscription::Clock { id, timeout, flags } => {
                    let state = match wakeup(id, timeout, flags, start) {
                        Ok(at) if at <= now => State::Ready {
                            error: 0,
                            nbytes: 0,
                        },
                        Ok(at) => State::WakesAt(at),
                        Err(error) => State::Ready { error, nbytes: 0 },
                    };
                    (EVENT_CLOCK, state)
                }
                Subscription::Fd { fd, kind } => (kind, self.fd_state(fd, kind)),
            };
            match state {
                State::Ready { error, nbytes } => {
                    let at = out_ptr + events.written * EVENT_SIZE;
                    write_event(m, at, userdata, error, kind, nbytes)?;
                    events.written += 1;
                }
                State::WakesAt(at) => {
                    events.earliest = Some(events.earliest.map_or(at, |e: Instant| e.min(at)));
                }
                State::WaitsForStdin => events.stdin_waits = true,
            }
        }
        Ok(events)
    }

    fn fd_state(&mut self, fd: u32, kind: u8) -> State {
        let reading = kind == EVENT_FD_READ;
        let bad = State::Ready {
            error: EBADF,
            nbytes: 0,
        };
        let ready = |nbytes| State::Ready { error: 0, nbytes };
        match self.fds.get_mut(fd) {
            Err(_) => bad,
            Ok(Entry::Stdin) if reading && self.stdio.stdin_ready() => ready(0),
            Ok(Entry::Stdin) if reading => State::WaitsForStdin,
            Ok(Entry::Stdout | Entry::Stderr) if !reading => ready(0),
            Ok(Entry::Stdin | Entry::Stdout | Entry::Stderr) => bad,
            Ok(Entry::File(file)) if reading => {
                let size = file.file.metadata().map(|meta| meta.len()).unwrap_or(0);
                let position = (&file.file).stream_position().unwrap_or(size);
                ready(size.saturating_sub(position))
            }
            Ok(Entry::File(_) | Entry::Dir(_)) => ready(0),
        }
    }
}

struct Events {
    written: u32,
    earliest: Option<Instant>,
    stdin_waits: bool,
}

#[cfg(test)]
mod tests {
    use super::super::errno::EINVAL;
    use super::super::testkit::{config, Guest};
    use super::super::WriteBudget;
    use super::*;
    use hako_engine_api::Import;
    use std::sync::Arc;

    const SUBS: u32 = 8192;
    const EVENTS: u32 = 12288;
    const NEVENTS: u32 = 16000;

    fn guest() -> Guest {
        Guest::new(config(Vec::new(), Arc::new(WriteBudget::new(0))))
    }

    fn clock(guest: &mut Guest, index: u32, userdata: u64, timeout: u64) {
        let at = SUBS + index * SUBSCRIPTION_SIZE;
        guest.put(at, &userdata.to_le_bytes());
        guest.put(at + 8, &[EVENT_CLOCK]);
        guest.put(at + 16, &1u32.to_le_bytes());
        guest.put(at + 24, &timeout.to_le_bytes());
        guest.put(at + 40, &0u16.to_le_bytes());
    }

    fn fd_read(guest: &mut Guest, index: u32, userdata: u64, fd: u32) {
        let at = SUBS + index * SUBSCRIPTION_SIZE;
        guest.put(at, &userdata.to_le_bytes());
        guest.put(at + 8, &[EVENT_FD_READ]);
        guest.put(at + 16, &fd.to_le_bytes());
    }

    fn poll(guest: &mut Guest, count: u32) -> Result<i32, Stop> {
        let args = [SUBS, EVENTS, count, NEVENTS].map(u64::from);
        guest.call(Import::PollOneoff, &args)
    }

    #[test]
    fn a_relative_clock_sleeps_and_reports_its_event() {
        let mut guest = guest();
        clock(&mut guest, 0, 77, 1_000_000);
        assert_eq!(poll(&mut guest, 1), Ok(0));
        assert_eq!(guest.u32_at(NEVENTS), 1);
        assert_eq!(guest.u64_at(EVENTS), 77);
        assert_eq!(guest.memory[EVENTS as usize + 8], 0);
        assert_eq!(guest.memory[EVENTS as usize + 10], EVENT_CLOCK);
    }

    #[test]
    fn a_cancelled_call_stops_polling() {
        let mut config = config(Vec::new(), Arc::new(WriteBudget::new(0)));
        let cancel = config.cancel.clone();
        config.deadline = None;
        let mut guest = Guest::new(config);
        clock(&mut guest, 0, 1, 3_600_000_000_000);
        let other = cancel.clone();
        let waker = std::thread::spawn(move || other.cancel());
        assert_eq!(poll(&mut guest, 1), Err(Stop::Abort));
        waker.join().unwrap();
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_ready_stdin_is_reported_without_sleeping() {
        let mut guest = guest();
        guest.wasi.stdio_mut().stdin = b"line\n".to_vec();
        clock(&mut guest, 0, 1, 3_600_000_000_000);
        fd_read(&mut guest, 1, 2, 0);
        assert_eq!(poll(&mut guest, 2), Ok(0));
        assert_eq!(guest.u32_at(NEVENTS), 1);
        assert_eq!(guest.u64_at(EVENTS), 2);
        assert_eq!(guest.memory[EVENTS as usize + 10], EVENT_FD_READ);
    }

    #[test]
    fn waiting_on_stdin_alone_is_left_to_the_runner() {
        let mut guest = guest();
        fd_read(&mut guest, 0, 1, 0);
        assert_eq!(poll(&mut guest, 1), Err(Stop::Abort));
        assert!(guest.wasi.stdio().would_block);
    }

    #[test]
    fn a_bad_fd_is_an_event_with_ebadf_and_no_subscription_is_einval() {
        let mut guest = guest();
        fd_read(&mut guest, 0, 5, 42);
        assert_eq!(poll(&mut guest, 1), Ok(0));
        assert_eq!(guest.u32_at(NEVENTS), 1);
        assert_eq!(guest.memory[EVENTS as usize + 8], EBADF as u8);
        assert_eq!(poll(&mut guest, 0), Ok(EINVAL));
        let beyond = [u64::from(SUBS), 65530, 1, u64::from(NEVENTS)];
        assert_eq!(
            guest.call(Import::PollOneoff, &beyond),
            Ok(super::super::errno::EFAULT)
        );
    }
}
