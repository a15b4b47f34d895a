;; memory_mib 16
;; Recursion until the stack is all but gone, with a host call at each level: host code must
;; never run out of stack, whichever frame the guest leaves it.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $down (param $n i32)
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 1))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $down (i32.add (local.get $n) (i32.const 1))))
  (func (export "_start") (call $down (i32.const 0))))
