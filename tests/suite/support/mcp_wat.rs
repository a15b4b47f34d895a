//! A guest written in WebAssembly text that speaks just enough of ABI 1 to be uploaded and
//! called: it reads stdin a line at a time, answers `server/discover` and `tools/list` (one
//! tool, `hostile`, whose schema is any object) and, for a `tools/call`, runs the test's own
//! instructions first, then answers the text `survived`. It echoes the id it was sent (the
//! bytes between `"id":` and the next comma, as hako writes its requests) and exits 0 at end
//! of input. What the tests put in it is what a Rust guest cannot say: `table.grow`, a loop of
//! host calls with hostile lengths.
//!
//! Memory: 0..128 scratch (iovecs, counts), 1024..2048 the constant strings, 4096.. the line
//! being read (at most 60,000 bytes), and whatever the test's instructions use above 65,536
//! (the memory starts with two pages).

/// The guest's module: `imports` and `fields` are module fields (imports first, then tables,
/// globals, functions; `$fd_read` and `$fd_write` are imported already), `on_call` the
/// instructions a `tools/call` runs before its answer.
pub fn mcp_guest(imports: &str, fields: &str, on_call: &str) -> Vec<u8> {
    let wat = mcp_guest_wat(imports, fields, on_call);
    wat::parse_str(&wat).unwrap_or_else(|err| panic!("the MCP guest assembles: {err}"))
}

/// The text of [`mcp_guest`]'s module, for a test that changes it further.
pub fn mcp_guest_wat(imports: &str, fields: &str, on_call: &str) -> String {
    const PREFIX: &str = r#"{"jsonrpc":"2.0","id":"#;
    const RESULT: &str = r#","result":"#;
    const DISCOVER: &str = r#"{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}"#;
    const TOOLS: &str = r#"{"tools":[{"name":"hostile","inputSchema":{"type":"object"}}]}"#;
    const CALLED: &str = r#"{"content":[{"type":"text","text":"survived"}]}"#;
    const END: &str = "}\n";
    // Each constant at its own address, escaped for a WebAssembly text string.
    let constants = [
        (1024, PREFIX),
        (1100, RESULT),
        (1200, DISCOVER),
        (1400, TOOLS),
        (1600, CALLED),
        (1800, END),
        (1900, r#""id":"#),
        (1910, "tools/call"),
        (1930, "tools/list"),
    ];
    let data: String = constants
        .iter()
        .map(|(at, text)| {
            let escaped: String = text.bytes().map(|byte| format!("\\{byte:02x}")).collect();
            format!("(data (i32.const {at}) \"{escaped}\")\n")
        })
        .collect();
    let len = |text: &str| text.len();
    let wat = format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  {imports}
  {MEMORY_LINE}
  {data}
  {fields}
  ;; One line of stdin into 4096..; its length, or -1 at the end of input.
  (func $read_line (result i32) (local $len i32)
    (block $done
      (loop $next
        (i32.store (i32.const 0) (i32.add (i32.const 4096) (local.get $len)))
        (i32.store (i32.const 4) (i32.const 1))
        (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
        (if (i32.eqz (i32.load (i32.const 16))) (then (return (i32.const -1))))
        (br_if $done (i32.eq (i32.load8_u (i32.add (i32.const 4096) (local.get $len))) (i32.const 10)))
        (local.set $len (i32.add (local.get $len) (i32.const 1)))
        (br_if $next (i32.lt_u (local.get $len) (i32.const 60000)))))
    (local.get $len))
  ;; Where the needle (at $needle, $nlen bytes) first is in the line of $hlen bytes, or -1.
  (func $find (param $needle i32) (param $nlen i32) (param $hlen i32) (result i32)
    (local $i i32) (local $j i32)
    (block $absent
      (loop $outer
        (br_if $absent (i32.gt_u (i32.add (local.get $i) (local.get $nlen)) (local.get $hlen)))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $inner
            (if (i32.eq (local.get $j) (local.get $nlen)) (then (return (local.get $i))))
            (br_if $mismatch
              (i32.ne
                (i32.load8_u (i32.add (i32.const 4096) (i32.add (local.get $i) (local.get $j))))
                (i32.load8_u (i32.add (local.get $needle) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i32.const -1))
  ;; Writes the answer with the id at $id ($idlen bytes) and the result at $result.
  (func $answer (param $id i32) (param $idlen i32) (param $result i32) (param $rlen i32)
    (i32.store (i32.const 32) (i32.const 1024)) (i32.store (i32.const 36) (i32.const {prefix}))
    (i32.store (i32.const 40) (local.get $id)) (i32.store (i32.const 44) (local.get $idlen))
    (i32.store (i32.const 48) (i32.const 1100)) (i32.store (i32.const 52) (i32.const {result}))
    (i32.store (i32.const 56) (local.get $result)) (i32.store (i32.const 60) (local.get $rlen))
    (i32.store (i32.const 64) (i32.const 1800)) (i32.store (i32.const 68) (i32.const {end}))
    (drop (call $fd_write (i32.const 1) (i32.const 32) (i32.const 5) (i32.const 16))))
  (func $on_call {on_call})
  (func (export "_start") (local $len i32) (local $id i32) (local $end i32)
    (loop $serve
      (local.set $len (call $read_line))
      (if (i32.lt_s (local.get $len) (i32.const 0)) (then (return)))
      (local.set $id (i32.add (call $find (i32.const 1900) (i32.const 5) (local.get $len)) (i32.const 5)))
      (local.set $end (local.get $id))
      (block $found
        (loop $scan
          (br_if $found (i32.ge_u (local.get $end) (local.get $len)))
          (br_if $found (i32.eq (i32.load8_u (i32.add (i32.const 4096) (local.get $end))) (i32.const 44)))
          (local.set $end (i32.add (local.get $end) (i32.const 1)))
          (br $scan)))
      (local.set $id (i32.add (i32.const 4096) (local.get $id)))
      (local.set $end (i32.sub (i32.add (i32.const 4096) (local.get $end)) (local.get $id)))
      (if (i32.ge_s (call $find (i32.const 1910) (i32.const 10) (local.get $len)) (i32.const 0))
        (then
          (call $on_call)
          (call $answer (local.get $id) (local.get $end) (i32.const 1600) (i32.const {called})))
        (else
          (if (i32.ge_s (call $find (i32.const 1930) (i32.const 10) (local.get $len)) (i32.const 0))
            (then (call $answer (local.get $id) (local.get $end) (i32.const 1400) (i32.const {tools})))
            (else (call $answer (local.get $id) (local.get $end) (i32.const 1200) (i32.const {discover}))))))
      (br $serve))))"#,
        prefix = len(PREFIX),
        result = len(RESULT),
        end = len(END),
        called = len(CALLED),
        tools = len(TOOLS),
        discover = len(DISCOVER),
    );
    wat
}

/// The line that declares the guest's memory in [`mcp_guest_wat`].
pub const MEMORY_LINE: &str = r#"(memory (export "memory") 2)"#;
