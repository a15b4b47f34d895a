//! Test helpers for the sandbox: a scripted [`Stdio`], a sandbox over temporary preopens and
//! guest-memory builders. Used only by the unit tests.
