/* programl_runtime.h: the C ABI of libprograml_runtime_cuda.so, version 5
 * (crates/runtime/src/abi.rs states the same in Rust; crates/runtime/tests/
 * header.rs compiles this header against that file's layout, field by
 * field, and against each function's signature; any change bumps the
 * version).
 *
 * The learned pass (programl-infer) runs on the CPU in the plugin itself,
 * with no libtorch; for device=cuda it dlopens this runtime with
 * RTLD_LOCAL on first use, never closes it (libtorch's static destructors
 * crash on unload), checks programl_runtime_abi_version(), opens each
 * bundle once per process and device, and predicts batch by batch. Every
 * function catches panics and libtorch errors: failures are a NULL or -1
 * return and a message from programl_runtime_last_error(). */
#ifndef PROGRAML_RUNTIME_H
#define PROGRAML_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PROGRAML_RUNTIME_ABI_VERSION 5u

/* The products' precision: asked for in programl_options, reported as the
 * precision a call ran at (F32, BF16 or INT8). */
typedef int32_t programl_dtype;
#define PROGRAML_DTYPE_F32 0
#define PROGRAML_DTYPE_BF16 1
#define PROGRAML_DTYPE_INT8 2
#define PROGRAML_DTYPE_AUTO 3

/* How one prediction runs; nothing is process-wide. steps <= 0: the
 * bundle's; threads >= 1; dtype one of the codes above (AUTO: INT8 where
 * the CPU has AVX-512 VNNI, else F32). */
typedef struct programl_options {
  int64_t steps;
  int32_t threads;
  programl_dtype dtype;
} programl_options;

/* The forward edges of one flow: edge k runs from sources[k] to targets[k]
 * with positions[k]. Pointers may be NULL when len is 0. */
typedef struct programl_edges {
  const int64_t *sources;
  const int64_t *targets;
  const int64_t *positions;
  size_t len;
} programl_edges;

/* One model input: the arrays of an unlabelled programl::batch::Batch (its
 * layout is that module's documentation). tokens and selector hold `nodes`
 * entries, offsets `graphs + 1`; edges are control, data, call. The runtime
 * rebuilds the batch and refuses arrays no batch could have. */
typedef struct programl_input {
  size_t nodes;
  const int64_t *tokens;
  const int64_t *selector;
  size_t graphs;
  const int64_t *offsets;
  programl_edges edges[3];
} programl_input;

typedef struct programl_model programl_model;

uint32_t programl_runtime_abi_version(void);

/* Loads and checks the bundle in bundle_dir (config.json,
 * weights.safetensors, vocabulary.json) on device "cpu", "cuda" or "auto".
 * NULL on failure. */
programl_model *programl_runtime_open(const char *bundle_dir, const char *device);

/* A JSON object describing the open model: abi, runtime, bundle, task, head,
 * classes, aux (the auxiliary input names of a graph head), steps,
 * vocab_size, device, cuda_linked, provenance. Valid while
 * the model is open; NULL on failure. */
const char *programl_runtime_info(const programl_model *model);

/* Class probabilities (softmax) of every node, row-major into out, which
 * must hold exactly nodes * classes floats, under *options. *in_effect (if
 * not NULL) receives the precision the products ran at (a precision the
 * device lacks gives F32). 0 or -1. */
int32_t programl_runtime_predict(programl_model *model, const programl_input *input, const programl_options *options,
                                 float *out, size_t out_len, programl_dtype *in_effect);

/* Class probabilities (softmax) of every graph of the input under a
 * graph-level bundle (head "graph"), row-major into out, which must hold
 * exactly graphs * classes floats. aux holds each graph's raw auxiliary
 * inputs row-major (aux_len == graphs * A, A = info's "aux" count; NULL and
 * 0 when A is 0). 0 or -1. programl_runtime_predict refuses graph-level
 * bundles and this function node-level ones. */
int32_t programl_runtime_predict_graph(programl_model *model, const programl_input *input, const float *aux,
                                       size_t aux_len, const programl_options *options, float *out, size_t out_len,
                                       programl_dtype *in_effect);

/* This thread's last error message: never NULL, empty if the last call
 * succeeded; valid until the thread's next call into the runtime. */
const char *programl_runtime_last_error(void);

/* Frees the model (NULL is ignored). */
void programl_runtime_close(programl_model *model);

#ifdef __cplusplus
}
#endif

#endif
