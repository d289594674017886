; Loading the plugin into opt for an unrelated pipeline makes no graph:
; -passes=verify builds no default pipeline, so the OptimizerLast instance
; never runs, even with the environment asking for graphs.
; RUN: rm -rf %t && mkdir -p %t/cwd && cd %t/cwd
; RUN: env PROGRAML_GRAPH_DIR=%t/g PROGRAML_GRAPH_FORMAT=json %opt -passes=verify %s -disable-output 2>&1 \
; RUN:   | count 0
; RUN: %opt -passes='verify,instcombine' %s -S -o %t/out.ll
; RUN: ls %t/cwd | count 0
; RUN: not ls %t/g
;
; The plugin does not change opt's output.
; RUN: %opt-plain -passes='verify,instcombine' %s -S -o %t/plain.ll
; RUN: diff %t/out.ll %t/plain.ll
; RUN: %opt -passes='programl-graph<out=%t/g>' %s -S -o %t/graphed.ll
; RUN: %opt-plain -passes='verify' %s -S -o %t/verified.ll
; RUN: diff %t/graphed.ll %t/verified.ll

define i32 @f(i32 %x) {
  %y = add i32 %x, 0
  ret i32 %y
}
