// Configuration by environment (clang has no pipeline text).
// RUN: rm -rf %t && mkdir -p %t/cwd && cd %t/cwd
//
// Defaults: the current directory, protobuf.
// RUN: %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a.o
// RUN: ls %t/cwd | %FileCheck %s --check-prefix=DEFAULT
// DEFAULT: {{^}}env.{{[0-9a-f]+}}.pb{{$}}
// RUN: ls %t/cwd | count 1
//
// Each variable; the directory is created, parents included.
// RUN: env PROGRAML_GRAPH_DIR=%t/deep/er PROGRAML_GRAPH_FORMAT=json PROGRAML_GRAPH_COMPAT=programl-0.3 \
// RUN:   %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a.o
// RUN: %graph-lines %t/deep/er/env.*.json | %FileCheck %s --check-prefix=COMPAT
// With programl-0.3, u (%2) is used twice, so it has two variable nodes.
// COMPAT-COUNT-2: variable i32 | i32 %2{{$}}
// COMPAT-NOT: variable i32 | i32 %2{{$}}
// RUN: env PROGRAML_GRAPH_DIR=%t/dot PROGRAML_GRAPH_FORMAT=dot %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a.o
// RUN: ls %t/dot | %FileCheck %s --check-prefix=DOT
// DOT: {{^}}env.{{.*}}.dot{{$}}
// An empty variable counts as unset.
// RUN: env PROGRAML_GRAPH_DIR=%t/empty PROGRAML_GRAPH_FORMAT= %clang -fpass-plugin=%plugin -O1 -c %s -o %t/a.o
// RUN: ls %t/empty | %FileCheck %s --check-prefix=DEFAULT
//
// Bad values: one warning naming the variable, no graph, the compile succeeds.
// RUN: env PROGRAML_GRAPH_DIR=%t/bad PROGRAML_GRAPH_FORMAT=xml \
// RUN:   %clang -fpass-plugin=%plugin -O1 -c %s -o %t/b.o 2>&1 | %FileCheck %s --check-prefix=BAD-FORMAT
// BAD-FORMAT: programl-graph: PROGRAML_GRAPH_FORMAT='xml' is not valid (expected pb, pbtxt, json or dot); no graph written
// BAD-FORMAT-NOT: programl-graph
// RUN: env PROGRAML_GRAPH_DIR=%t/bad PROGRAML_GRAPH_COMPAT=programl-9 \
// RUN:   %clang -fpass-plugin=%plugin -O0 -c %s -o %t/b.o 2>&1 | %FileCheck %s --check-prefix=BAD-COMPAT
// BAD-COMPAT: programl-graph: PROGRAML_GRAPH_COMPAT='programl-9' is not valid (expected paper or programl-0.3); no graph written
// RUN: env PROGRAML_GRAPH_DIR=%t/bad PROGRAML_GRAPH_AUTO=maybe \
// RUN:   %clang -fpass-plugin=%plugin -O0 -c %s -o %t/b.o 2>&1 | %FileCheck %s --check-prefix=BAD-AUTO
// BAD-AUTO: programl-graph: PROGRAML_GRAPH_AUTO='maybe' is not valid (expected 1, on, yes, true, 0, off, no or false (any case)); no graph written
// RUN: not ls %t/bad
// RUN: ls %t/b.o
//
// PROGRAML_GRAPH_AUTO=0: the plugin stays loaded but makes no graphs; any
// case of the words.
// RUN: env PROGRAML_GRAPH_DIR=%t/off PROGRAML_GRAPH_AUTO=0 %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o
// RUN: env PROGRAML_GRAPH_DIR=%t/off PROGRAML_GRAPH_AUTO=Off %clang -fpass-plugin=%plugin -O2 -c %s -o %t/a.o
// RUN: not ls %t/off
//
// An unusable directory (here a regular file) is a warning, not an error.
// RUN: touch %t/file
// RUN: env PROGRAML_GRAPH_DIR=%t/file %clang -fpass-plugin=%plugin -O0 -c %s -o %t/c.o 2>&1 \
// RUN:   | %FileCheck %s --check-prefix=IO
// IO: programl-graph: {{.*}}/file: cannot create directory: {{.*}}
// RUN: ls %t/c.o

int g(int t) {
  int u = t + 1;
  return u * u;
}
