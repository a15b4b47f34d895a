;; memory_mib 16
;; The largest table, filled again and again, and grown past its bound in between.
(module
  (table $t 65536 funcref)
  (memory (export "memory") 1)
  (func $f)
  (elem declare func $f)
  (func (export "_start")
    (loop $again
      (table.fill $t (i32.const 0) (ref.func $f) (i32.const 65536))
      (drop (table.grow $t (ref.null func) (i32.const 1)))
      (br $again))))
