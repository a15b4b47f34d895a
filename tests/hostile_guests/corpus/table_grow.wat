;; memory_mib 1024
;; One table.grow of 0xF0000000 elements: wasmer allocated 32 GiB for it and the allocator
;; aborted the process, on every compiler. It must answer -1 (then the guest returns).
(module
  (table $t 1 funcref)
  (memory (export "memory") 1)
  (func (export "_start")
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 0xF0000000)) (i32.const -1))
      (then unreachable))))
