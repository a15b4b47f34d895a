;; memory_mib 1024
;; A loop of random_get over 1 GiB: each call filled the whole buffer at once, and the call ran
;; 20 times past its limit. It must end at the limit.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (memory.grow (i32.const 16383)))
    (loop $again
      (drop (call $random (i32.const 0) (i32.const 0x40000000)))
      (br $again))))
