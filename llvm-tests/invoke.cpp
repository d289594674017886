// C++ with exceptions: invoke and landingpad, through clang -fpass-plugin.
// RUN: rm -rf %t && mkdir %t
// RUN: env PROGRAML_GRAPH_DIR=%t PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clangxx -fexceptions -fcxx-exceptions -fpass-plugin=%plugin -O1 -c %s -o %t.o
// RUN: ls %t | count 1
// RUN: %graph-lines %t/*.json | %FileCheck %s

// CHECK: graph {{.*}}/invoke.{{[0-9a-f]+}}.json
// CHECK-DAG: node [[INVOKE:[0-9]+]] instruction invoke | %{{[0-9]+}} = invoke noundef i32 @_Z9may_throwi(i32 noundef %{{[0-9]+}}) to label %[[NORMAL:[0-9]+]] unwind label %[[UNWIND:[0-9]+]]
// CHECK-DAG: node [[PAD:[0-9]+]] instruction landingpad | %{{[0-9]+}} = landingpad { ptr, i32 } catch ptr null
// CHECK-DAG: node [[PHI:[0-9]+]] instruction phi |
// Two successors: the normal destination at position 0, the unwind one at 1.
// CHECK-DAG: edge control 0 [[INVOKE]] -> [[PHI]] |
// CHECK-DAG: edge control 1 [[INVOKE]] -> [[PAD]] |
// invoke is a call site: linked to the declared callee and back.
// CHECK-DAG: node [[CALLEE:[0-9]+]] instruction ; undefined function |
// CHECK-DAG: edge call 0 [[INVOKE]] -> [[CALLEE]] |
// CHECK-DAG: edge call 0 [[CALLEE]] -> [[INVOKE]] |

int may_throw(int);

int guarded(int x) {
  try {
    return may_throw(x);
  } catch (...) {
    return -1;
  }
}
