//! Bounds-checked access to the guest's linear memory: little-endian integers, byte ranges and
//! the `iovec`/`ciovec` arrays of WASI preview 1. Every guest pointer goes through here, and
//! every range outside memory is `EFAULT`. It does not know what the bytes mean.

use super::error::errno::{EFAULT, EINVAL};
use super::{Fail, MAX_IOVECS};

/// The byte range `ptr .. ptr + len`, or `EFAULT` when any part lies outside memory.
pub fn range(memory: &[u8], ptr: u32, len: u32) -> Result<std::ops::Range<usize>, Fail> {
    let start = ptr as usize;
    let end = start.checked_add(len as usize).ok_or(Fail::Errno(EFAULT))?;
    if end > memory.len() {
        return Err(Fail::Errno(EFAULT));
    }
    Ok(start..end)
}

/// The guest bytes at `ptr .. ptr + len`.
pub fn bytes(memory: &[u8], ptr: u32, len: u32) -> Result<&[u8], Fail> {
    let range = range(memory, ptr, len)?;
    Ok(&memory[range])
}

/// The guest bytes at `ptr .. ptr + len`, writable.
pub fn bytes_mut(memory: &mut [u8], ptr: u32, len: u32) -> Result<&mut [u8], Fail> {
    let range = range(memory, ptr, len)?;
    Ok(&mut memory[range])
}

fn array<const N: usize>(memory: &[u8], ptr: u32) -> Result<[u8; N], Fail> {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes(memory, ptr, N as u32)?);
    Ok(out)
}

pub fn read_u16(memory: &[u8], ptr: u32) -> Result<u16, Fail> {
    Ok(u16::from_le_bytes(array(memory, ptr)?))
}

pub fn read_u32(memory: &[u8], ptr: u32) -> Result<u32, Fail> {
    Ok(u32::from_le_bytes(array(memory, ptr)?))
}

pub fn read_u64(memory: &[u8], ptr: u32) -> Result<u64, Fail> {
    Ok(u64::from_le_bytes(array(memory, ptr)?))
}

pub fn write(memory: &mut [u8], ptr: u32, value: &[u8]) -> Result<(), Fail> {
    let len = u32::try_from(value.len()).map_err(|_| Fail::Errno(EFAULT))?;
    bytes_mut(memory, ptr, len)?.copy_from_slice(value);
    Ok(())
}

pub fn write_u32(memory: &mut [u8], ptr: u32, value: u32) -> Result<(), Fail> {
    write(memory, ptr, &value.to_le_bytes())
}

pub fn write_u64(memory: &mut [u8], ptr: u32, value: u64) -> Result<(), Fail> {
    write(memory, ptr, &value.to_le_bytes())
}

/// One `iovec` (or `ciovec`): eight bytes, a buffer pointer then its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoVec {
    pub ptr: u32,
    pub len: u32,
}

/// The `index`-th entry of an iovec array at `base`; the caller checked the array with
/// [`iovecs`]. The buffer it names is not checked here.
pub fn iovec(memory: &[u8], base: u32, index: u32) -> Result<IoVec, Fail> {
    let at = base.wrapping_add(index.wrapping_mul(8));
    Ok(IoVec {
        ptr: read_u32(memory, at)?,
        len: read_u32(memory, at.wrapping_add(4))?,
    })
}

/// Checks that an iovec array of `count` entries (at most [`MAX_IOVECS`], `EINVAL` beyond)
/// lies inside memory, and that every buffer it names does too, so that a faulty array is
/// refused before anything is read or written. Returns the total length of the buffers.
pub fn iovecs(memory: &[u8], base: u32, count: u32) -> Result<u64, Fail> {
    if count > MAX_IOVECS {
        return Err(Fail::Errno(EINVAL));
    }
    let size = count.checked_mul(8).ok_or(Fail::Errno(EFAULT))?;
    range(memory, base, size)?;
    let mut total = 0u64;
    for index in 0..count {
        let vec = iovec(memory, base, index)?;
        range(memory, vec.ptr, vec.len)?;
        total += u64::from(vec.len);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_past_the_end_is_a_fault() {
        let memory = vec![0u8; 16];
        assert!(range(&memory, 8, 8).is_ok());
        assert!(matches!(range(&memory, 9, 8), Err(Fail::Errno(EFAULT))));
        assert!(matches!(
            range(&memory, u32::MAX, 2),
            Err(Fail::Errno(EFAULT))
        ));
    }

    #[test]
    fn integers_are_little_endian() {
        let mut memory = vec![0u8; 16];
        write_u32(&mut memory, 0, 0x0403_0201).unwrap();
        assert_eq!(&memory[..4], &[1, 2, 3, 4]);
        write_u64(&mut memory, 8, 0x0807_0605_0403_0201).unwrap();
        assert_eq!(read_u64(&memory, 8).unwrap(), 0x0807_0605_0403_0201);
        assert_eq!(read_u16(&memory, 0).unwrap(), 0x0201);
    }

    #[test]
    fn an_iovec_naming_a_buffer_outside_memory_is_refused() {
        let mut memory = vec![0u8; 64];
        write_u32(&mut memory, 0, 32).unwrap();
        write_u32(&mut memory, 4, 16).unwrap();
        assert_eq!(iovecs(&memory, 0, 1).unwrap(), 16);
        write_u32(&mut memory, 4, 40).unwrap();
        assert!(matches!(iovecs(&memory, 0, 1), Err(Fail::Errno(EFAULT))));
        assert!(matches!(iovecs(&memory, 60, 1), Err(Fail::Errno(EFAULT))));
    }

    #[test]
    fn more_iovecs_than_iov_max_are_einval_before_any_is_read() {
        let memory = vec![0u8; 16 * 1024];
        assert_eq!(iovecs(&memory, 0, MAX_IOVECS).unwrap(), 0);
        assert!(matches!(
            iovecs(&memory, 0, MAX_IOVECS + 1),
            Err(Fail::Errno(EINVAL))
        ));
        assert!(matches!(
            iovecs(&memory, 0, u32::MAX),
            Err(Fail::Errno(EINVAL))
        ));
    }
}
