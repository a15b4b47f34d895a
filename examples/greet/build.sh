#!/bin/sh
# Builds module.wasm reproducibly: the same sources, Cargo.lock and Rust
# toolchain give the same bytes on any machine and in any checkout folder.
#
#   ./build.sh           build and copy target/.../greet.wasm to module.wasm
#   ./build.sh --check   build and fail if module.wasm differs from the build
#
# Needs the wasm32-wasip1 target: rustup target add wasm32-wasip1
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-wasip1" ]; then
    echo "build.sh: the wasm32-wasip1 target is not installed; run: rustup target add wasm32-wasip1" >&2
    exit 1
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
# Paths of the checkout and of the registry sources end up in panic
# locations; remap them to fixed names so the folder does not matter.
# Everything else is pinned in Cargo.toml's release profile.
RUSTFLAGS="--remap-path-prefix=$here=/greet --remap-path-prefix=$cargo_home=/cargo"
export RUSTFLAGS
export CARGO_TARGET_DIR="$here/target"
export SOURCE_DATE_EPOCH=0
unset CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS

cargo build --release --locked --target wasm32-wasip1

built="$CARGO_TARGET_DIR/wasm32-wasip1/release/greet.wasm"
if [ "${1:-}" = "--check" ]; then
    if cmp -s "$built" module.wasm; then
        echo "module.wasm is up to date ($(rustc --version))"
    else
        echo "module.wasm differs from a fresh build with $(rustc --version)" >&2
        exit 1
    fi
else
    cp "$built" module.wasm
    echo "wrote module.wasm ($(wc -c <module.wasm) bytes, $(rustc --version))"
fi
