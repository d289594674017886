// REQUIRES: programl-cli
// PROGRAML_INFER under clang: the pass runs at OptimizerLast at every -O
// level and annotates the final IR; no graph file is written unless a
// PROGRAML_GRAPH_* variable asks for one; nothing on stderr.
// RUN: rm -rf %t && mkdir -p %t/cwd
// RUN: cd %t/cwd && env PROGRAML_INFER='model=%models/reachability;device=cpu' \
// RUN:   %clang -fpass-plugin=%plugin -O0 -S -emit-llvm %s -o %t/O0.ll 2> %t/O0.err
// RUN: count 0 < %t/O0.err
// RUN: %FileCheck %s < %t/O0.ll
// RUN: cd %t/cwd && env PROGRAML_INFER='model=%models/reachability;device=cpu' \
// RUN:   %clang -fpass-plugin=%plugin -O2 -S -emit-llvm %s -o %t/O2.ll 2> %t/O2.err
// RUN: count 0 < %t/O2.err
// RUN: %FileCheck %s --check-prefixes=CHECK,O2 < %t/O2.ll
// RUN: ls %t/cwd | count 0
//
// The annotations are of the final IR: at -O0 the allocas are still there.
// RUN: %programl annotations %t/O0.ll | %FileCheck %s --check-prefix=O0-JSON
// O0-JSON: "text":"%{{[0-9]+}} = alloca
// O0-JSON-SAME: "models":[{"format":"programl-model","graph":"{{[0-9a-f]+}}","head":"node","steps":30,"task":"reachability","version":1}]
//
// An object file is produced as usual, and -c is annotated all the same
// (the sidecar receives the module's decisions).
// RUN: cd %t/cwd && env PROGRAML_INFER='model=%models/reachability;device=cpu;sidecar=%t/side.jsonl' \
// RUN:   %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o
// RUN: ls %t/a.o
// RUN: %FileCheck %s --check-prefix=SIDECAR < %t/side.jsonl
// SIDECAR: {"kind":"decisions","module":"{{.*}}infer-clang.c","task":"reachability","model":"{{.*}}models/reachability","dtype":"{{f32|int8}}","steps":30,"threshold":0.5,"roots":[{"root":{{[0-9]+}},"nodes":{{\[\[}}
//
// With a PROGRAML_GRAPH_* variable the graph is written too.
// RUN: cd %t/cwd && env PROGRAML_INFER='model=%models/reachability;device=cpu' PROGRAML_GRAPH_FORMAT=json \
// RUN:   %clang -fpass-plugin=%plugin -O2 -c %s -o %t/b.o
// RUN: ls %t/cwd | count 1

// CHECK: define {{.*}} @count_positive({{.*}} !programl.args ![[ARGS:[0-9]+]]
// CHECK-SAME: !programl.reachability.roots
// O2-NOT: alloca
// CHECK: !programl.schema = !{![[S:[0-9]+]]}
// CHECK: ![[S]] = !{!"1"}

int count_positive(const int *a, int n) {
  int c = 0;
  for (int i = 0; i < n; i++)
    if (a[i] > 0)
      c++;
  return c;
}

int main(int argc, char **argv) {
  int a[3] = {argc, -1, 2};
  return count_positive(a, 3);
}
