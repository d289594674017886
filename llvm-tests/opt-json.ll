; The pass under opt: one JSON graph per module in the out= directory,
; created if missing.
; RUN: rm -rf %t && mkdir %t
; RUN: %opt -passes='programl-graph<out=%t/graphs;format=json>' %s -disable-output
; RUN: ls %t/graphs | count 1
; RUN: cat %t/graphs/*.json | %FileCheck %s --check-prefix=JSON
; RUN: %graph-lines %t/graphs/*.json | %FileCheck %s
;
; The file is named after the source file: <stem>.<hash>.<pid>.json.
; RUN: ls %t/graphs | %FileCheck %s --check-prefix=NAME
; NAME: {{^}}max.{{[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]}}.json{{$}}

; Raw node-link JSON, as upstream graph2json writes it.
; The default mode records each function's entry instruction (node 3).
; JSON: {"directed":true,"multigraph":true,"graph":{"function":[{"name":"max","module":0,"features":{"entry_node":[3]}}],"module":[{"name":"max.c"
; JSON-SAME: "nodes":[{"id":0,"type":0,"text":"[external]"
; JSON-SAME: "text":"icmp"
; JSON-SAME: "text":"br","function":0,"block":0,"features":{"full_text":["br i1 %c, label %then, label %else"]}
; JSON-SAME: "links":[

; One node per instruction, SSA value and constant.
; CHECK: node 0 instruction [external] | [external]
; CHECK-DAG: node [[A:[0-9]+]] variable i32 | i32 %a
; CHECK-DAG: node [[CMP:[0-9]+]] instruction icmp | %c = icmp sgt i32 %a, %b
; CHECK-DAG: node [[BR:[0-9]+]] instruction br | br i1 %c, label %then, label %else
; CHECK-DAG: node [[RA:[0-9]+]] instruction ret | ret i32 %a
; CHECK-DAG: node [[RB:[0-9]+]] instruction ret | ret i32 %b
; The conditional branch: true successor at position 0, false at 1.
; CHECK-DAG: edge control 0 [[BR]] -> [[RA]] |
; CHECK-DAG: edge control 1 [[BR]] -> [[RB]] |
; Operands: %a is operand 0 of the icmp; [external] calls the function.
; CHECK-DAG: edge data 0 [[A]] -> [[CMP]] |
; CHECK-DAG: edge call 0 0 -> [[CMP]] |
; CHECK-DAG: edge call 0 [[RA]] -> 0 |

source_filename = "max.c"

define i32 @max(i32 %a, i32 %b) {
entry:
  %c = icmp sgt i32 %a, %b
  br i1 %c, label %then, label %else
then:
  ret i32 %a
else:
  ret i32 %b
}
