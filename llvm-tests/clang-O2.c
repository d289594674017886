// clang -fpass-plugin at -O2: one graph per module, of the final
// (optimised) IR: no allocas left, the call inlined away.
// RUN: rm -rf %t && mkdir %t
// RUN: env PROGRAML_GRAPH_DIR=%t/g PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o
// RUN: ls %t/g | count 1
// RUN: %graph-lines %t/g/*.json | %FileCheck %s
// ThinLTO pre-link also ends with OptimizerLast: still exactly one graph.
// RUN: env PROGRAML_GRAPH_DIR=%t/thin PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O2 -flto=thin -c %s -o %t/a.bc
// RUN: ls %t/thin | count 1
// Other levels too, each into its own object (one graph per object: a
// rebuild of an object replaces its graph).
// RUN: env PROGRAML_GRAPH_DIR=%t/levels PROGRAML_GRAPH_FORMAT=json %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a-O1.o
// RUN: env PROGRAML_GRAPH_DIR=%t/levels PROGRAML_GRAPH_FORMAT=json %clang -fpass-plugin=%plugin -O3 -c %s -o %t/a-O3.o
// RUN: env PROGRAML_GRAPH_DIR=%t/levels PROGRAML_GRAPH_FORMAT=json %clang -fpass-plugin=%plugin -Os -c %s -o %t/a-Os.o
// RUN: env PROGRAML_GRAPH_DIR=%t/levels PROGRAML_GRAPH_FORMAT=json %clang -fpass-plugin=%plugin -Oz -c %s -o %t/a-Oz.o
// RUN: ls %t/levels | count 4
// RUN: env PROGRAML_GRAPH_DIR=%t/levels PROGRAML_GRAPH_FORMAT=json %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a-O1.o
// RUN: ls %t/levels | count 4

// CHECK: graph {{.*}}/clang-O2.{{[0-9a-f]+}}.json
// CHECK-NOT: alloca
// CHECK-NOT: instruction call
// CHECK: node {{[0-9]+}} instruction shl | %{{[0-9]+}} = shl nsw i32 %{{[0-9]+}}, 1
// CHECK-NOT: alloca
// CHECK-NOT: instruction call

int twice(int x) { return 2 * x; }

int main(int argc, char **argv) { return twice(argc); }
