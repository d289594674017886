; One graph per module even when both the pipeline name and the extension
; point apply. A default pipeline in opt runs the OptimizerLast instance as
; clang does (configured by the environment); naming programl-graph in the
; same pipeline stands it down.
; RUN: rm -rf %t && mkdir -p %t && cd %t
;
; default<O2> alone: the extension point writes one graph.
; RUN: env PROGRAML_GRAPH_DIR=%t/ep PROGRAML_GRAPH_FORMAT=json %opt -passes='default<O2>' %s -disable-output
; RUN: ls %t/ep | count 1
; RUN: env PROGRAML_GRAPH_DIR=%t/ep0 PROGRAML_GRAPH_FORMAT=json %opt -passes='default<O0>' %s -disable-output
; RUN: ls %t/ep0 | count 1
; RUN: env PROGRAML_GRAPH_DIR=%t/legacy PROGRAML_GRAPH_FORMAT=json %opt -O3 %s -disable-output
; RUN: ls %t/legacy | count 1
;
; Named too, before or after: only the named instance writes.
; RUN: env PROGRAML_GRAPH_DIR=%t/env PROGRAML_GRAPH_FORMAT=json \
; RUN:   %opt -passes='default<O2>,programl-graph<out=%t/named>' %s -disable-output
; RUN: env PROGRAML_GRAPH_DIR=%t/env PROGRAML_GRAPH_FORMAT=json \
; RUN:   %opt -passes='programl-graph<out=%t/named2>,default<O2>' %s -disable-output
; RUN: not ls %t/env
; RUN: ls %t/named | count 1
; RUN: ls %t/named2 | count 1
; The named instance sees the IR at its place in the pipeline.
; RUN: %graph-lines %t/named/*.json | %FileCheck %s --check-prefix=AFTER
; RUN: %graph-lines %t/named2/*.json | %FileCheck %s --check-prefix=BEFORE
; AFTER-NOT: alloca
; BEFORE: instruction alloca
;
; PROGRAML_GRAPH_AUTO=0 turns off the extension point, not the named pass.
; RUN: env PROGRAML_GRAPH_DIR=%t/auto PROGRAML_GRAPH_AUTO=0 %opt -passes='default<O2>' %s -disable-output
; RUN: not ls %t/auto
; RUN: env PROGRAML_GRAPH_DIR=%t/auto PROGRAML_GRAPH_AUTO=0 %opt -passes='programl-graph' %s -disable-output
; RUN: ls %t/auto | count 1

source_filename = "once.c"

define i32 @f(i32 %x) {
  %p = alloca i32
  store i32 %x, ptr %p
  %y = load i32, ptr %p
  ret i32 %y
}
