// Settings errors never fail a compile, but a bad pipeline does fail opt;
// PROGRAML_LOG sets how much the pass says, always on stderr.
// RUN: rm -rf %t && mkdir %t
// RUN: env PROGRAML_INFER='model=%models/reachability;roots=some' %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o 2>&1 \
// RUN:   | %FileCheck %s --check-prefix=BAD-ENV
// BAD-ENV: programl-infer: PROGRAML_INFER: roots='some' is not valid (expected sample, all or marked); no prediction
// BAD-ENV-NOT: {{.}}
// RUN: ls %t/a.o
// RUN: env PROGRAML_INFER='device=cpu' %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o 2>&1 | %FileCheck %s --check-prefix=NO-MODEL
// NO-MODEL: programl-infer: PROGRAML_INFER: model=DIR is required (a bundle directory, e.g. models/reachability); no prediction
//
// A blank PROGRAML_INFER counts as unset: nothing said, and the graph pass
// writes its graph as without it. (One that is not UTF-8 is one warning:
// passes/src/infer/params.rs, the_environment_value.)
// RUN: mkdir %t/blank && cd %t/blank && env PROGRAML_INFER=' ' %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a.o 2>&1 | count 0
// RUN: ls %t/blank | %FileCheck %s --check-prefix=BLANK
// BLANK: {{^}}infer-env.{{[0-9a-f]+}}.pb{{$}}
//
// In a `;` list a path may hold `,` (a pipeline cannot give one).
// RUN: cp -r %models/reachability '%t/reach,1'
// RUN: env PROGRAML_INFER='model=%t/reach,1;device=cpu' %clang -fpass-plugin=%plugin -O1 -S -emit-llvm %s -o %t/comma.ll 2>&1 | count 0
// RUN: grep -q '!programl.schema' %t/comma.ll
//
// RUN: %clang -O1 -S -emit-llvm %s -o %t/a.ll
// RUN: not %opt -passes='programl-infer<model=%models/reachability;colour=red>' %t/a.ll -disable-output 2>&1 | %FileCheck %s --check-prefix=BAD-PASS
// BAD-PASS: programl-infer: in 'programl-infer<model={{.*}};colour=red>': unknown parameter 'colour'
//
// Info: one line per module with the figures; stdout stays clean.
// RUN: env PROGRAML_LOG=info %opt -passes='programl-infer<model=%models/reachability;device=cpu>' %t/a.ll -S -o - 2> %t/info.err | %FileCheck %s --check-prefix=STDOUT
// STDOUT: !programl.schema
// RUN: %FileCheck %s --check-prefix=INFO < %t/info.err
// INFO: programl-infer [info]: {{.*}}infer-env.c: reachability at Pipeline, {{[0-9]+}} roots, {{[0-9]+}} nodes, {{[0-9]+}} positive decisions; ms: runtime={{[0-9.]+}} bundle={{[0-9.]+}} graph={{[0-9.]+}} features={{[0-9.]+}} inference={{[0-9.]+}} annotate={{[0-9.]+}} verify=0.00 total={{[0-9.]+}}
// RUN: env PROGRAML_LOG=loud %opt -passes='programl-infer<model=%models/reachability;device=cpu>' %t/a.ll -disable-output 2>&1 | %FileCheck %s --check-prefix=LOUD
// LOUD: programl: PROGRAML_LOG='loud' is not one of off, error, warn, info, debug, trace; using warn
// LOUD-NOT: {{.}}
// RUN: env PROGRAML_LOG=off %opt -passes='programl-infer<model=%t/nowhere>' %t/a.ll -disable-output 2>&1 | count 0

int f(int x) { return x > 3 ? x * 2 : x - 1; }
