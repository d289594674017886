; Conditional branch, switch, phi and an unreachable block.
define i32 @classify(i32 %x) {
entry:
  %neg = icmp slt i32 %x, 0
  br i1 %neg, label %negative, label %dispatch

negative:
  br label %exit

dispatch:
  switch i32 %x, label %other [
    i32 0, label %zero
    i32 1, label %one
  ]

zero:
  br label %exit

one:
  br label %exit

other:
  %big = mul i32 %x, 2
  br label %exit

dead:
  %never = add i32 %x, 7
  br label %exit

exit:
  %r = phi i32 [ -1, %negative ], [ 0, %zero ], [ 1, %one ], [ %big, %other ], [ %never, %dead ]
  ret i32 %r
}
