

[external]
1retB*
(
	full_text

ret ptr @.str, !dbg !23
iptr8B^
\
	full_textO
M
K@.str = private unnamed_addr constant [5 x i8] c"0.16\00", align 1, !dbg !0
4ret 8B)
'
	full_text

ret i32 4096, !dbg !28
&i328B

	full_text


i32 4096    "'
json_c_version


entry_node
"+
json_c_version_num


entry_node
*œ
;/root/.cache/programl-rs/thirdparty/json-c/json_c_version.cè
^
llvm_data_layoutJ
H
Fe-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128
-
llvm_target_triple

x86_64-pc-linux-gnu