; Hand-written IR for tests/analysis.rs: unreachable blocks (clang rarely
; leaves any), an unreachable cycle, irreducible loops and a switch with
; duplicate successors.

define i32 @unreachable_blocks(i32 %x) {
entry:
  %c = icmp sgt i32 %x, 0
  br i1 %c, label %pos, label %exit

pos:
  %y = add i32 %x, 1
  br label %exit

dead:
  %z = mul i32 %x, 3
  br label %deadloop

deadloop:
  %w = phi i32 [ %z, %dead ], [ %w2, %deadloop ]
  %w2 = add i32 %w, 1
  %dc = icmp slt i32 %w2, 10
  br i1 %dc, label %deadloop, label %exit

exit:
  %r = phi i32 [ %x, %entry ], [ %y, %pos ], [ %w2, %deadloop ]
  ret i32 %r
}

define i32 @irreducible(i32 %a, i32 %n) {
entry:
  %c = icmp eq i32 %a, 0
  br i1 %c, label %left, label %right

left:
  %l = phi i32 [ 0, %entry ], [ %m1, %middle ]
  %l1 = add i32 %l, 1
  %lc = icmp slt i32 %l1, %n
  br i1 %lc, label %right, label %out

right:
  %r = phi i32 [ 5, %entry ], [ %l1, %left ]
  %r1 = add i32 %r, 2
  %rc = icmp slt i32 %r1, %n
  br i1 %rc, label %middle, label %out

middle:
  %m1 = mul i32 %r1, 3
  %mc = icmp sgt i32 %m1, 1000
  br i1 %mc, label %out, label %left

out:
  %o = phi i32 [ %l1, %left ], [ %r1, %right ], [ %m1, %middle ]
  ret i32 %o
}

define void @unreachable_self_loop() {
entry:
  ret void

spin:
  br label %spin
}

define i32 @switch_duplicates(i32 %x) {
entry:
  switch i32 %x, label %d [
    i32 0, label %a
    i32 1, label %a
    i32 2, label %b
  ]

a:
  %s = add i32 %x, %x
  br label %d

b:
  br label %a

d:
  %p = phi i32 [ 0, %entry ], [ %s, %a ]
  ret i32 %p
}

define i32 @dead_diamond(i32 %x) {
entry:
  ret i32 %x

top:
  %t = icmp eq i32 %x, 3
  br i1 %t, label %l, label %r

l:
  br label %join

r:
  br label %join

join:
  %j = phi i32 [ 1, %l ], [ 2, %r ]
  br label %top
}
