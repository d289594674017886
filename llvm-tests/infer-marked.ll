; REQUIRES: programl-cli
; roots=marked: the roots are the instructions carrying !programl.root !{}
; (for datadep, the values they define); marks that cannot be roots are
; skipped with a note at PROGRAML_LOG=info.
; RUN: rm -rf %t && mkdir %t
; RUN: %programl graph --format json %s > %t/graph.json
; RUN: %graph-lines %t/graph.json > %t/lines.txt
;
; RUN: %opt -passes='programl-infer<model=%models/reachability;device=cpu;roots=marked>' %s -S -o %t/reach.ll
; RUN: %programl annotations %t/reach.ll > %t/reach.json
; RUN: %python %S/Inputs/check_annotations.py %t/reach.json %t/graph.json reachability | %FileCheck %s --check-prefix=REACH
; REACH: ok: {{[0-9]+}} instructions anchored, 2 reachability roots
; RUN: cat %t/lines.txt %t/reach.ll | %FileCheck %s --check-prefix=REACH-IR
; REACH-IR-DAG: node [[MUL:[0-9]+]] instruction mul | %m = mul i32 %s, %s
; REACH-IR-DAG: node [[RET:[0-9]+]] instruction ret | ret i32 %r
; REACH-IR: define i32 @f(i32 %a, i32 %b) !programl.args ![[ARGS:[0-9]+]] !programl.reachability.roots ![[ROOTS:[0-9]+]] {
; REACH-IR: %m = mul i32 %s, %s, !programl.root ![[MARK:[0-9]+]], !programl.node ![[MULN:[0-9]+]], !programl.value
; REACH-IR: ret i32 %r, !programl.root ![[MARK]], !programl.node
; REACH-IR-DAG: ![[ROOTS]] = !{i64 [[MUL]], i64 [[RET]]}
; REACH-IR-DAG: ![[MULN]] = !{i64 [[MUL]]}
; REACH-IR-DAG: ![[MARK]] = !{}
;
; datadep: the root is the value the marked mul defines; the marked ret
; defines none and is skipped.
; RUN: env PROGRAML_LOG=info %opt -passes='programl-infer<model=%models/datadep;device=cpu;roots=marked>' %s -S -o %t/dd.ll 2> %t/dd.err
; RUN: %FileCheck %s --check-prefix=DD-LOG < %t/dd.err
; DD-LOG: programl-infer [info]: marked.c: marked instruction {{[0-9]+}} defines no value, so no datadep root; skipped
; DD-LOG: programl-infer [info]: marked.c: datadep at Pipeline, 1 roots
; RUN: %programl annotations %t/dd.ll > %t/dd.json
; RUN: cat %t/lines.txt %t/dd.json | %FileCheck %s --check-prefix=DD
; DD: node [[MULV:[0-9]+]] variable i32 | i32 %m
; DD: "predictions":{"datadep":[{"function":"f","positives":[{{.*}}],"root":[[MULV]]}]}
;
; No mark at all: no root, only the schema and the model entry.
; RUN: %opt-plain -S %s -o - | %python -c "import sys; print(sys.stdin.read().replace(', !programl.root !0', ''))" > %t/unmarked.ll
; Said as a warning, at the default log level: C or C++ compiled as is
; carries no marks, and roots=marked then predicts nothing.
; RUN: %opt -passes='programl-infer<model=%models/reachability;device=cpu;roots=marked>' %t/unmarked.ll -S -o %t/none.ll 2> %t/none.err
; RUN: %FileCheck %s --check-prefix=NONE < %t/none.err
; NONE: marked.c: roots=marked, but no instruction carries !programl.root for reachability: nothing to predict

source_filename = "marked.c"

define i32 @f(i32 %a, i32 %b) {
entry:
  %s = add i32 %a, %b
  %m = mul i32 %s, %s, !programl.root !0
  %c = icmp sgt i32 %m, 10
  br i1 %c, label %big, label %small
big:
  %r = sub i32 %m, %a
  ret i32 %r, !programl.root !0
small:
  ret i32 %s
}

!0 = !{}
