; A bad parameter fails pipeline parsing: opt exits non-zero with a message
; naming the parameter (once), does not crash, and writes nothing.
; RUN: rm -rf %t && mkdir %t && cd %t
; RUN: not %opt -passes='programl-graph<colour=red>' %s -disable-output 2>&1 \
; RUN:   | %FileCheck %s --check-prefix=ERROR-KEY --implicit-check-not=programl-graph:
; RUN: not %opt -passes='verify,programl-graph<format=xml>' %s -disable-output 2>&1 \
; RUN:   | %FileCheck %s --check-prefix=ERROR-FORMAT --implicit-check-not=programl-graph:
; RUN: not %opt -passes='programl-graph<out=%t;compat=programl-9>' %s -disable-output 2>&1 \
; RUN:   | %FileCheck %s --check-prefix=ERROR-COMPAT
; RUN: not %opt -passes='programl-graph<format>' %s -disable-output 2>&1 \
; RUN:   | %FileCheck %s --check-prefix=ERROR-VALUE
; RUN: not %opt -passes='programl-graph<out=>' %s -disable-output 2>&1 \
; RUN:   | %FileCheck %s --check-prefix=ERROR-OUT
; RUN: ls %t | count 0
;
; ERROR-KEY: programl-graph: in 'programl-graph<colour=red>': unknown parameter 'colour' (expected out=DIR, format=FMT or compat=MODE)
; ERROR-KEY: unknown pass name 'programl-graph<colour=red>'
; ERROR-FORMAT: programl-graph: in 'programl-graph<format=xml>': parameter format='xml' is not valid (expected pb, pbtxt, json or dot)
; ERROR-FORMAT: unknown module pass 'programl-graph<format=xml>'
; ERROR-COMPAT: parameter compat='programl-9' is not valid (expected paper or programl-0.3)
; ERROR-VALUE: parameter 'format' needs a value (format=...)
; ERROR-OUT: parameter 'out' needs a value (out=...)

define void @f() {
  ret void
}
