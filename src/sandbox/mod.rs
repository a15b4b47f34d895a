//! The sandbox a guest runs in: WASI preview 1, written once and engine-neutral, over the
//! guest's linear memory as a byte slice. It owns the file descriptor table, the preopens
//! (confined by `cap-std`, never by hand-written path checks), the write budget, clocks,
//! randomness and `poll_oneoff`. It does not own the protocol on stdin/stdout: that is the
//! caller's [`Stdio`], so the call contract stays in `call`.

mod budget;
mod cancel;

pub use budget::WriteBudget;
pub use cancel::Cancel;
