; REQUIRES: programl-cli
; The pass and the programl CLI build the same graph from the same IR, in
; both modes and in every format.
; RUN: rm -rf %t && mkdir %t
; RUN: %programl graph --format json %s -o %t/cli.json
; RUN: %opt -passes='programl-graph<out=-;format=json>' %s -disable-output > %t/pass.json
; RUN: diff %t/cli.json %t/pass.json
; RUN: %programl graph --format pbtxt --compat programl-0.3 %s -o %t/cli.pbtxt
; RUN: %opt -passes='programl-graph<out=-;format=pbtxt;compat=programl-0.3>' %s -disable-output > %t/pass.pbtxt
; RUN: diff %t/cli.pbtxt %t/pass.pbtxt
; RUN: %programl graph --format pb %s -o %t/cli.pb
; RUN: %opt -passes='programl-graph<out=%t/pb;format=pb>' %s -disable-output
; RUN: cmp %t/cli.pb %t/pb/cli-same.*.pb
; RUN: %programl graph --format dot %s -o %t/cli.dot
; RUN: %opt -passes='programl-graph<out=-;format=dot>' %s -disable-output > %t/pass.dot
; RUN: diff %t/cli.dot %t/pass.dot

source_filename = "cli-same.c"

@table = constant [3 x i32] [i32 1, i32 2, i32 3]

define i32 @lookup(i32 %i) {
entry:
  %in = icmp ult i32 %i, 3
  br i1 %in, label %load, label %out
load:
  %p = getelementptr [3 x i32], ptr @table, i32 0, i32 %i
  %v = load i32, ptr %p
  br label %out
out:
  %r = phi i32 [ %v, %load ], [ -1, %entry ]
  ret i32 %r
}

declare i32 @external(i32)

define i32 @caller(i32 %x) {
  %a = call i32 @external(i32 %x)
  %b = call i32 @lookup(i32 %a)
  ret i32 %b
}
