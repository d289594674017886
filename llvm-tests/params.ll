; Pass parameters: compat=, format=, out=- (stdout), and parameters
; overriding the environment.
; RUN: rm -rf %t && mkdir %t
;
; compat: the paper's graph has one node per SSA value; ProGraML 0.3.2's
; has a fresh variable node per use.
; RUN: %opt -passes='programl-graph<out=-;format=json>' %s -disable-output \
; RUN:   | %graph-lines | %FileCheck %s --check-prefix=PAPER
; RUN: %opt -passes='programl-graph<out=-;format=json;compat=paper>' %s -disable-output \
; RUN:   | %graph-lines | %FileCheck %s --check-prefix=PAPER
; RUN: %opt -passes='programl-graph<compat=programl-0.3;format=json;out=->' %s -disable-output \
; RUN:   | %graph-lines | %FileCheck %s --check-prefix=COMPAT
; PAPER: graph {{.*}} nodes=11 edges=16
; PAPER-COUNT-1: variable i32 | i32 %s
; PAPER-NOT: variable i32 | i32 %s
; COMPAT: graph {{.*}} nodes=12 edges=17
; COMPAT-COUNT-2: variable i32 | i32 %s
; COMPAT-NOT: variable i32 | i32 %s
;
; format: each writer, with the matching file extension; pb is the default
; (the last two runs write the one name: the same module, no -o).
; RUN: %opt -passes='programl-graph<out=%t/f;format=pbtxt>' %s -disable-output
; RUN: %opt -passes='programl-graph<out=%t/f;format=dot>' %s -disable-output
; RUN: %opt -passes='programl-graph<out=%t/f;format=pb>' %s -disable-output
; RUN: %opt -passes='programl-graph<out=%t/f>' %s -disable-output
; RUN: ls %t/f | %FileCheck %s --check-prefix=FILES
; FILES-DAG: {{^}}sum.{{.*}}.dot{{$}}
; FILES-DAG: {{^}}sum.{{.*}}.pb{{$}}
; FILES-DAG: {{^}}sum.{{.*}}.pbtxt{{$}}
; RUN: ls %t/f | count 3
; RUN: cat %t/f/*.pbtxt | %FileCheck %s --check-prefix=PBTXT
; PBTXT: text: "[external]"
; PBTXT: text: "add"
; RUN: cat %t/f/*.dot | %FileCheck %s --check-prefix=DOT
; DOT: digraph
;
; Parameters win over the environment; variables fill what they leave open.
; RUN: env PROGRAML_GRAPH_DIR=%t/env PROGRAML_GRAPH_FORMAT=dot PROGRAML_GRAPH_COMPAT=programl-0.3 \
; RUN:   %opt -passes='programl-graph<format=json;out=%t/param>' %s -disable-output
; RUN: not ls %t/env
; RUN: %graph-lines %t/param/*.json | %FileCheck %s --check-prefix=COMPAT
; A bad variable is harmless when a parameter overrides it.
; RUN: env PROGRAML_GRAPH_FORMAT=xml %opt -passes='programl-graph<format=json;out=->' %s -disable-output 2>&1 \
; RUN:   | %graph-lines | %FileCheck %s --check-prefix=PAPER

source_filename = "sum.c"

define i32 @sum(i32 %a, i32 %b) {
entry:
  %s = add i32 %a, %b
  %c = icmp sgt i32 %s, 0
  br i1 %c, label %pos, label %neg
pos:
  ret i32 %s
neg:
  ret i32 0
}
