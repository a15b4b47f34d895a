//! LLVM for hako's wasmer engine, for a program that compiles with it in its own process: the
//! compile worker `hako-llvm`, tests and benchmarks. The `hako` command does not depend on
//! this crate's code, and so never links LLVM (see [`hako_engine_wasmer::link_llvm`] for why).
//! Without the `llvm` feature, [`link`] does nothing.

/// Links LLVM into this process: from now on, its LLVM engines compile.
pub fn link() {
    #[cfg(feature = "llvm")]
    hako_engine_wasmer::link_llvm(|| Box::new(wasmer_compiler_llvm::LLVM::new()));
}
