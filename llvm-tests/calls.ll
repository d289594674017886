; Calls: direct and indirect call sites get call edges (an indirect one to
; and from [external]); [external] reaches the externally visible functions
; only.
; RUN: %opt -passes='programl-graph<out=-;format=json>' %s -disable-output | %graph-lines > %t
; RUN: %FileCheck %s < %t
; RUN: %FileCheck %s --check-prefix=INTERNAL < %t

; CHECK-DAG: node {{[0-9]+}} instruction add | %y = add i32 %x, 1
; CHECK-DAG: node [[IND:[0-9]+]] instruction call | %r = call i32 %fn(i32 %v)
; CHECK-DAG: node [[APPLYRET:[0-9]+]] instruction ret | ret i32 %r
; CHECK-DAG: node [[DIRECT:[0-9]+]] instruction call | %q = call i32 @apply(ptr @inc, i32 41)
; CHECK-DAG: node [[FN:[0-9]+]] constant ptr | ptr @inc
;
; The indirect call: to [external] and back.
; CHECK-DAG: edge call 0 [[IND]] -> 0 |
; CHECK-DAG: edge call 0 0 -> [[IND]] |
; The direct call: to @apply's entry (the indirect call) and back from its ret.
; CHECK-DAG: edge call 0 [[DIRECT]] -> [[IND]] |
; CHECK-DAG: edge call 0 [[APPLYRET]] -> [[DIRECT]] |
; The callee operand of a direct call is no data edge, but a function passed
; as an argument is one (operand 0).
; CHECK-DAG: edge data 0 [[FN]] -> [[DIRECT]] |
; @inc is internal: no edges to or from [external].
; INTERNAL-NOT: | [external] -> %y = add i32 %x, 1
; INTERNAL-NOT: | ret i32 %y -> [external]

source_filename = "calls.c"

define internal i32 @inc(i32 %x) {
  %y = add i32 %x, 1
  ret i32 %y
}

define i32 @apply(ptr %fn, i32 %v) {
  %r = call i32 %fn(i32 %v)
  ret i32 %r
}

define i32 @use() {
  %q = call i32 @apply(ptr @inc, i32 41)
  ret i32 %q
}
