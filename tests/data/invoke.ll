; invoke / landingpad / resume.
declare i32 @__gxx_personality_v0(...)
declare void @may_throw(i32)
declare void @cleanup()

define void @thrower(i32 %x) {
  call void @may_throw(i32 %x)
  ret void
}

define i32 @catcher(i32 %x) personality ptr @__gxx_personality_v0 {
entry:
  invoke void @thrower(i32 %x)
          to label %ok unwind label %lpad

ok:
  ret i32 0

lpad:
  %lp = landingpad { ptr, i32 }
          cleanup
  call void @cleanup()
  resume { ptr, i32 } %lp
}
