//! The process-wide WASI functions that touch no file descriptor: `args_*`, `environ_*`,
//! `clock_*` and `random_get`. It does not sleep (`poll_oneoff` does) nor end the run
//! (`proc_exit` is answered in the dispatcher).

use super::error::errno::{EFAULT, EINVAL, EIO};
use super::memory;
use super::{Cancel, Fail, PIECE_BYTES};
use rustix::time::{ClockId, Timespec};

/// `args_sizes_get` / `environ_sizes_get`: the count, and the bytes of every string with its
/// terminating NUL.
pub fn strings_sizes(
    strings: &[String],
    memory: &mut [u8],
    count_ptr: u32,
    size_ptr: u32,
) -> Result<(), Fail> {
    let size: usize = strings.iter().map(|s| s.len() + 1).sum();
    let count = u32::try_from(strings.len()).map_err(|_| Fail::Errno(EFAULT))?;
    let size = u32::try_from(size).map_err(|_| Fail::Errno(EFAULT))?;
    memory::write_u32(memory, count_ptr, count)?;
    memory::write_u32(memory, size_ptr, size)
}

/// `args_get` / `environ_get`: one pointer per string at `pointers`, the NUL-terminated
/// strings one after another at `buffer`.
pub fn strings_get(
    strings: &[String],
    memory: &mut [u8],
    pointers: u32,
    buffer: u32,
) -> Result<(), Fail> {
    let mut at = buffer;
    for (index, string) in strings.iter().enumerate() {
        let slot = pointers
            .checked_add(u32::try_from(index * 4).map_err(|_| Fail::Errno(EFAULT))?)
            .ok_or(Fail::Errno(EFAULT))?;
        memory::write_u32(memory, slot, at)?;
        memory::write(memory, at, string.as_bytes())?;
        let end = at
            .checked_add(u32::try_from(string.len()).map_err(|_| Fail::Errno(EFAULT))?)
            .ok_or(Fail::Errno(EFAULT))?;
        memory::write(memory, end, &[0])?;
        at = end.checked_add(1).ok_or(Fail::Errno(EFAULT))?;
    }
    Ok(())
}

/// The host clock behind a WASI clock id: realtime, monotonic, process and thread CPU time.
pub fn clock(id: u32) -> Result<ClockId, Fail> {
    match id {
        0 => Ok(ClockId::Realtime),
        1 => Ok(ClockId::Monotonic),
        2 => Ok(ClockId::ProcessCPUTime),
        3 => Ok(ClockId::ThreadCPUTime),
        _ => Err(Fail::Errno(EINVAL)),
    }
}

/// A clock reading in nanoseconds.
pub fn now(id: ClockId) -> u64 {
    nanos(rustix::time::clock_gettime(id))
}

fn nanos(time: Timespec) -> u64 {
    u64::try_from(time.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(time.tv_nsec).unwrap_or(0))
}

pub fn clock_res_get(memory: &mut [u8], id: u32, ptr: u32) -> Result<(), Fail> {
    let resolution = nanos(rustix::time::clock_getres(clock(id)?)).max(1);
    memory::write_u64(memory, ptr, resolution)
}

pub fn clock_time_get(memory: &mut [u8], id: u32, ptr: u32) -> Result<(), Fail> {
    let time = now(clock(id)?);
    memory::write_u64(memory, ptr, time)
}

/// Fills the buffer a piece at a time, looking at `cancel` before each: a guest may ask for
/// gigabytes at once, which takes the kernel seconds.
pub fn random_get(memory: &mut [u8], ptr: u32, len: u32, cancel: &Cancel) -> Result<(), Fail> {
    let buffer = memory::bytes_mut(memory, ptr, len)?;
    for piece in buffer.chunks_mut(PIECE_BYTES) {
        super::go_on(cancel)?;
        getrandom::fill(piece).map_err(|_| Fail::Errno(EIO))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings() -> Vec<String> {
        vec!["greet".into(), "x".into()]
    }

    #[test]
    fn sizes_count_every_terminating_nul() {
        let mut memory = vec![0u8; 16];
        strings_sizes(&strings(), &mut memory, 0, 4).unwrap();
        assert_eq!(memory::read_u32(&memory, 0).unwrap(), 2);
        assert_eq!(memory::read_u32(&memory, 4).unwrap(), 8);
    }

    #[test]
    fn strings_are_written_with_pointers_and_nuls() {
        let mut memory = vec![0xaau8; 32];
        strings_get(&strings(), &mut memory, 0, 16).unwrap();
        assert_eq!(memory::read_u32(&memory, 0).unwrap(), 16);
        assert_eq!(memory::read_u32(&memory, 4).unwrap(), 22);
        assert_eq!(&memory[16..24], b"greet\0x\0");
    }

    #[test]
    fn strings_that_do_not_fit_are_a_fault() {
        let mut memory = vec![0u8; 20];
        assert_eq!(
            strings_get(&strings(), &mut memory, 0, 16),
            Err(Fail::Errno(EFAULT))
        );
        assert_eq!(
            strings_sizes(&strings(), &mut memory, 0, 18),
            Err(Fail::Errno(EFAULT))
        );
    }

    #[test]
    fn every_clock_reads_and_a_bad_id_is_einval() {
        let mut memory = vec![0u8; 16];
        for id in 0..4 {
            clock_time_get(&mut memory, id, 0).unwrap();
            clock_res_get(&mut memory, id, 8).unwrap();
            assert_ne!(memory::read_u64(&memory, 8).unwrap(), 0);
        }
        clock_time_get(&mut memory, 0, 0).unwrap();
        // Realtime is after 2020-01-01.
        assert!(memory::read_u64(&memory, 0).unwrap() > 1_577_836_800_000_000_000);
        assert_eq!(clock_time_get(&mut memory, 4, 0), Err(Fail::Errno(EINVAL)));
        assert_eq!(clock_time_get(&mut memory, 0, 12), Err(Fail::Errno(EFAULT)));
    }

    #[test]
    fn random_bytes_fill_the_buffer() {
        let cancel = Cancel::new();
        let mut memory = vec![0u8; 64];
        random_get(&mut memory, 0, 64, &cancel).unwrap();
        assert!(memory.iter().any(|&byte| byte != 0));
        assert_eq!(
            random_get(&mut memory, 60, 8, &cancel),
            Err(Fail::Errno(EFAULT))
        );
    }

    #[test]
    fn a_cancelled_random_get_stops_between_pieces() {
        let cancel = Cancel::new();
        let mut memory = vec![0u8; 3 * PIECE_BYTES];
        let len = memory.len() as u32;
        cancel.cancel();
        assert_eq!(
            random_get(&mut memory, 0, len, &cancel),
            Err(Fail::Stop(hako_engine_api::Stop::Abort))
        );
        assert!(memory.iter().all(|&byte| byte == 0));
    }
}
