// clang -fpass-plugin at -O0: the OptimizerLast extension point runs there
// too, so each module gets exactly one graph, of the unoptimised IR.
// RUN: rm -rf %t && mkdir %t
// RUN: env PROGRAML_GRAPH_DIR=%t/g PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O0 -c %s -o %t/a.o
// RUN: ls %t/g | count 1
// RUN: %graph-lines %t/g/*.json | %FileCheck %s
// Also with -emit-llvm, and as an LTO pre-link compile.
// RUN: env PROGRAML_GRAPH_DIR=%t/ll PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O0 -S -emit-llvm %s -o %t/a.ll
// RUN: ls %t/ll | count 1
// RUN: env PROGRAML_GRAPH_DIR=%t/lto PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O0 -flto -c %s -o %t/a.bc
// RUN: ls %t/lto | count 1

// CHECK: graph {{.*}}/clang-O0.{{[0-9a-f]+}}.json
// CHECK-DAG: node {{[0-9]+}} instruction alloca | %{{[0-9]+}} = alloca i32, align 4
// CHECK-DAG: node {{[0-9]+}} instruction call | %{{[0-9]+}} = call i32 @twice(i32 noundef %{{[0-9]+}})
// CHECK-DAG: edge call 0 {{[0-9]+}} -> {{[0-9]+}} | %{{[0-9]+}} = call i32 @twice({{.*}}) -> %{{[0-9]+}} = alloca

int twice(int x) { return 2 * x; }

int main(int argc, char **argv) { return twice(argc); }
