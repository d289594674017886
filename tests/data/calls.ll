; Calls to a defined, a declared and an indirect function; varargs; an
; intrinsic; a global shared by two functions; constant expressions.
@counter = global i32 0
@table = global [2 x ptr] [ptr @inc, ptr @twice]
@fmt = private constant [4 x i8] c"%d\0A\00"

declare i32 @printf(ptr, ...)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define internal i32 @inc(i32 %v) {
  %c = load i32, ptr @counter
  %n = add i32 %c, %v
  store i32 %n, ptr @counter
  ret i32 %n
}

define i32 @twice(i32 %v) {
  %d = shl i32 %v, 1
  ret i32 %d
}

define i32 @main(i32 %argc) {
entry:
  %buf = alloca [16 x i8]
  call void @llvm.memset.p0.i64(ptr %buf, i8 0, i64 16, i1 false)
  %a = call i32 @inc(i32 %argc)
  %slot = getelementptr [2 x ptr], ptr @table, i32 0, i32 1
  %fp = load ptr, ptr %slot
  %b = call i32 %fp(i32 %a)
  %p = call i32 (ptr, ...) @printf(ptr @fmt, i32 %b)
  %q = call i32 (ptr, ...) @printf(ptr getelementptr inbounds ([4 x i8], ptr @fmt, i64 0, i64 1), i32 %a)
  %g = load i32, ptr @counter
  ret i32 %g
}
