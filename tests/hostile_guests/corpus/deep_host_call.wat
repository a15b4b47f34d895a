;; memory_mib 16
;; Recursion 4,096 levels deep with a host call at each level, then back up, forever: host
;; calls made deep in the guest's stack, many times over. (Not to the stack's very end: a host
;; call a few bytes above the guard page leaves wasmer's interrupt registry locked, README
;; "Bounds", known and open; plain recursion to the end is the drawn modules' `Recurse`.)
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $down (param $n i32)
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 1))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (if (i32.lt_u (local.get $n) (i32.const 4096))
      (then (call $down (i32.add (local.get $n) (i32.const 1))))))
  (func (export "_start") (loop $again (call $down (i32.const 0)) (br $again))))
