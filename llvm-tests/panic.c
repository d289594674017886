// A panic inside the pass never aborts the compiler: it is caught at the pass
// boundary and reported as one warning line; the compile goes on.
// RUN: rm -rf %t && mkdir %t
// RUN: env PROGRAML_GRAPH_DIR=%t/g PROGRAML_GRAPH_PANIC_FOR_TESTING=1 \
// RUN:   %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o 2>&1 | %FileCheck %s
// RUN: ls %t/a.o
// RUN: not ls %t/g
// RUN: %clang -S -emit-llvm -O0 %s -o %t/a.ll
// RUN: env PROGRAML_GRAPH_PANIC_FOR_TESTING=1 \
// RUN:   %opt -passes='programl-graph<out=%t/g>,verify' %t/a.ll -S -o %t/b.ll 2>&1 | %FileCheck %s
// RUN: ls %t/b.ll
// RUN: not ls %t/g
//
// CHECK: programl-graph: internal error, no graph written: PROGRAML_GRAPH_PANIC_FOR_TESTING is set at {{.*}}graph.rs:{{[0-9]+}}
// CHECK-NOT: {{.}}

int f(int x) { return x + 1; }
