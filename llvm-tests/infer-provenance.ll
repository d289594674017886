; A bundle whose provenance does not fit the module: one warning listing
; every mismatch, the module unchanged, and libtorch never loaded (the
; check comes first). This module has typed pointers (opt -opaque-pointers=0).
; RUN: rm -rf %t && mkdir %t
; RUN: %opt-plain -opaque-pointers=0 -S %s -o %t/plain.ll
;
; The shipped bundle was trained on opaque-pointer IR.
; RUN: env LD_DEBUG=files %opt -opaque-pointers=0 -passes='programl-infer<model=%models/reachability;device=cpu>' %s -S -o %t/out.ll 2> %t/err
; RUN: diff %t/plain.ll %t/out.ll
; RUN: %FileCheck %s --check-prefix=TYPED --implicit-check-not=libtorch < %t/err
; TYPED: programl-infer: typed.c: bundle {{.*}}reachability does not match this module: it was trained on opaque-pointer IR, this module has typed-pointer IR; module unchanged
;
; Another LLVM, another graph mode, another featurisation, and typed pointers.
; RUN: cp -r %models/reachability %t/other
; RUN: %python %S/Inputs/infer/bundle_edit.py %t/other llvm_major=15 graph_mode=programl-0.3 featurisation_version=2 opaque_pointers=false
; RUN: %opt -opaque-pointers=0 -passes='programl-infer<model=%t/other;device=cpu>' %s -S -o %t/out.ll 2> %t/err
; RUN: diff %t/plain.ll %t/out.ll
; RUN: %FileCheck %s --check-prefix=OTHER < %t/err
; OTHER: programl-infer: typed.c: bundle {{.*}}other does not match this module: it was trained on programl-0.3 graphs, this pass builds paper graphs; it was trained on LLVM 15 IR, this is LLVM 16; its featurisation version is 2, this plugin's is 1; module unchanged
; OTHER-NOT: {{.}}
;
; A bundle that claims a graph-level head without its settings: refused,
; naming the file and what is missing.
; RUN: cp -r %models/reachability %t/graph
; RUN: %python %S/Inputs/infer/bundle_edit.py %t/graph head=graph opaque_pointers=false
; RUN: %opt -opaque-pointers=0 -passes='programl-infer<model=%t/graph;device=cpu>' %s -S -o %t/out.ll 2> %t/err
; RUN: diff %t/plain.ll %t/out.ll
; RUN: %FileCheck %s --check-prefix=GRAPH < %t/err
; GRAPH: programl-infer: typed.c: cannot open bundle {{.*}}graph: {{.*}}graph/config.json: head "graph" without hyper.graph (the graph head's settings); module unchanged

source_filename = "typed.c"

define i32 @load(i32* %p) {
entry:
  %v = load i32, i32* %p
  %c = icmp sgt i32 %v, 0
  br i1 %c, label %pos, label %neg
pos:
  ret i32 %v
neg:
  %n = sub i32 0, %v
  ret i32 %n
}
