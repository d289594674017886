// Two kernels sharing a helper, and another helper only the second calls
// (out of line; the second static, so dropped where unused): the learned pass's
// per-kernel device mapping takes each kernel's graph (tests/subgraph.rs,
// llvm-tests/infer-devmap-kernels.test). With -DNO_SAXPY or -DNO_SQUASH,
// one kernel alone.
__attribute__((noinline)) float scale(float x, float by) {
    return x * by + 1.0f;
}

__attribute__((noinline)) static float clampish(float x) {
    return x > 4.0f ? 4.0f : x;
}

#ifndef NO_SAXPY
__kernel void saxpy(__global float *y, __global const float *x, float a) {
    size_t i = get_global_id(0);
    y[i] = scale(x[i], a) + y[i];
}
#endif

#ifndef NO_SQUASH
__kernel void squash(__global float *out, __global const float *in, int n) {
    size_t i = get_global_id(0);
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) {
        acc += clampish(scale(in[(i + k) % n], 0.5f));
    }
    out[i] = acc;
}
#endif
