#!/usr/bin/env python3
"""A fresh process's first call, against what a user would run instead.

For each package: `hako call NAME TOOL ARGS` on a folder store the package was uploaded to (a new
process that opens the store, loads the artifact made at upload, makes one call, prints the
answer and exits), once per hako engine and compiler asked for, beside the stock wasmtime CLI
(`wasmtime run --allow-precompiled` on the module compiled by `wasmtime compile`) given the same
request line on stdin, with the same folders mounted. Each is timed from spawn to exit, as a
shell would; the subjects take turns, one process each, for ROUNDS rounds (the order rotates
every round), so a slow spell of a shared machine falls on all of them. The medians and their
ratio to the wasmtime CLI are printed, a markdown table per package.

    [HAKO=BINARY] [UPLOADER=BINARY] [WASMTIME=BINARY] [ROUNDS=40] benches/fresh/run.py
        [--compilers cranelift,llvm] [--no-hako-wasmtime] [--also LABEL=BINARY]...
        [PACKAGE_DIR...]

`--also LABEL=BINARY` adds another hako build's calls (its wasmer compilers only) to the same
rounds, on the same store, to compare two builds.

Packages default to every folder of benches/packages with a module.wasm (build.sh builds
them). HAKO defaults to `target/release/hako` (or under $CARGO_TARGET_DIR), built as it is;
`--compilers llvm` needs a build with the `llvm` feature to upload: UPLOADER names the hako that
uploads (default: HAKO), so a build without LLVM can be timed running the LLVM code another
build made, as an operator would run it (see the README's "A fresh process"). WASMTIME defaults
to `wasmtime` on PATH; `cargo install wasmtime-cli --version 48.0.0 --locked --root DIR` installs the version
hako's own wasmtime engine is (DIR/bin/wasmtime). The wasmtime CLI runs with its defaults (no
pooling allocator, copy-on-write memory images from the mapped file), which is how it is run.

What each side does that the other does not: hako checks the store's folder, reads the package's
`current` and record, verifies the artifact's checksums (the code, and the memory image when the
engine made one) before loading it, enforces the call contract (time and memory limits) and
makes and removes a fresh /volume/tmp folder; the wasmtime CLI is given a folder made once.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The `_meta` hako's own request lines carry (src/protocol/request.rs), so the guest reads the
# same line from both.
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "hako", "version": "bench"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def fail(message):
    print(f"run.py: {message}", file=sys.stderr)
    sys.exit(1)


def checked(command, stdin=None):
    done = subprocess.run(command, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        fail(
            f"{' '.join(map(str, command))} exited {done.returncode}:\n"
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )
    return done


def hako_binary():
    given = os.environ.get("HAKO")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = target / "release" / "hako"
    if not binary.exists():
        fail(f"{binary} is not built (cargo build --release), or set HAKO")
    return binary


def wasmtime_binary():
    given = os.environ.get("WASMTIME") or shutil.which("wasmtime")
    if not given:
        fail(
            "no wasmtime CLI: cargo install wasmtime-cli --version 48.0.0 --locked --root DIR, "
            "then WASMTIME=DIR/bin/wasmtime"
        )
    return Path(given)


class Subject:
    """One command, run once per round with the same stdin."""

    def __init__(self, name, command, stdin, check):
        self.name = name
        self.command = [str(part) for part in command]
        self.stdin = stdin
        self.check = check
        self.samples = []

    def run(self):
        started = time.perf_counter()
        done = checked(self.command, self.stdin)
        elapsed = time.perf_counter() - started
        self.check(done.stdout)
        return elapsed


def ignore(_stdout):
    """hako's exit status 0 says the function answered."""


def wasmtime_answer_check(stdout):
    line = stdout.split(b"\n", 1)[0]
    answer = json.loads(line)
    if answer.get("id") != "fresh" or "result" not in answer:
        fail(f"the wasmtime CLI's answer is not a result: {line[:300]!r}")


def package_subjects(package, hako, uploader, wasmtime, compilers, hako_wasmtime, also, work):
    manifest = json.loads((package / "subako-package.json").read_text())
    bench = json.loads((package / "bench.json").read_text())
    name, tool, arguments = manifest["name"], bench["tool"], bench.get("args", {})
    store = work / "store"
    upload = [uploader, "upload", package, "--store", store]
    for compiler in compilers:
        upload += ["--compiler", compiler]
    checked(upload)
    if hako_wasmtime:
        # The version is stored already: this upload only compiles and stores its wasmtime
        # artifact.
        checked([uploader, "upload", package, "--store", store, "--engine", "wasmtime"])

    cwasm = work / f"{name}.cwasm"
    checked([wasmtime, "compile", package / "module.wasm", "-o", cwasm])
    volume = work / "volume"
    volume.mkdir(exist_ok=True)
    line = {
        "jsonrpc": "2.0",
        "id": "fresh",
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": META},
    }
    request = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    stock = [wasmtime, "run", "--allow-precompiled", "--argv0", name]
    stock += ["--dir", f"{volume}::/volume/tmp"]
    if (package / "assets").is_dir():
        stock += ["--dir", f"{package / 'assets'}::/package"]
    stock.append(cwasm)

    call = [hako, "call", name, tool, json.dumps(arguments), "--store", store]
    subjects = [
        Subject(f"hako wasmer-{compiler}", call + ["--compiler", compiler], b"", ignore)
        for compiler in compilers
    ]
    if hako_wasmtime:
        subjects.append(Subject("hako wasmtime", call + ["--engine", "wasmtime"], b"", ignore))
    for label, binary in also:
        other = [binary] + call[1:]
        subjects += [
            Subject(f"{label} wasmer-{compiler}", other + ["--compiler", compiler], b"", ignore)
            for compiler in compilers
        ]
    subjects.append(Subject("wasmtime CLI", stock, request, wasmtime_answer_check))
    return name, subjects


def measure(subjects, rounds):
    for subject in subjects:
        subject.run()  # warm-up: page cache, and any compile a first call does
    for round_ in range(rounds):
        turn = round_ % len(subjects)
        for subject in subjects[turn:] + subjects[:turn]:
            subject.samples.append(subject.run())


def report(name, subjects, rounds):
    baseline = statistics.median(subjects[-1].samples)
    print(f"\n### {name} ({rounds} rounds, ms from spawn to exit)\n")
    print("| subject | p50 | p10 | p90 | p50 / wasmtime CLI |")
    print("| --- | --- | --- | --- | --- |")
    for subject in subjects:
        samples = sorted(subject.samples)
        p50 = statistics.median(samples)
        p10 = samples[len(samples) // 10]
        p90 = samples[len(samples) * 9 // 10]
        print(
            f"| {subject.name} | {p50 * 1e3:.2f} | {p10 * 1e3:.2f} | {p90 * 1e3:.2f} "
            f"| {p50 / baseline:.2f} |"
        )


def main():
    args = sys.argv[1:]
    compilers = ["cranelift"]
    hako_wasmtime = True
    also = []
    packages = []
    while args:
        arg = args.pop(0)
        if arg == "--compilers":
            if not args:
                fail("--compilers needs a list, e.g. cranelift,llvm")
            compilers = [c for c in args.pop(0).split(",") if c]
        elif arg == "--also":
            label, _, binary = (args.pop(0) if args else "").partition("=")
            if not label or not binary:
                fail("--also needs LABEL=BINARY")
            also.append((label, Path(binary)))
        elif arg == "--no-hako-wasmtime":
            hako_wasmtime = False
        elif arg.startswith("-"):
            fail(f"unknown flag {arg} (see the top of this file)")
        else:
            packages.append(Path(arg))
    if not packages:
        corpus = ROOT / "benches" / "packages"
        packages = sorted(p for p in corpus.iterdir() if (p / "module.wasm").is_file())
        if not packages:
            fail("no package of benches/packages is built: run benches/packages/build.sh")
    rounds = os.environ.get("ROUNDS", "40")
    if not rounds.isdigit() or int(rounds) < 1:
        fail(f"ROUNDS must be a whole number of at least 1, not {rounds!r}")
    rounds = int(rounds)
    hako, wasmtime = hako_binary(), wasmtime_binary()
    uploader = Path(os.environ.get("UPLOADER", hako))
    print(checked([wasmtime, "--version"]).stdout.decode().strip())
    for package in packages:
        with tempfile.TemporaryDirectory(prefix="hako-fresh-") as work:
            name, subjects = package_subjects(
                package.resolve(),
                hako,
                uploader,
                wasmtime,
                compilers,
                hako_wasmtime,
                also,
                Path(work),
            )
            measure(subjects, rounds)
            report(name, subjects, rounds)


if __name__ == "__main__":
    main()
