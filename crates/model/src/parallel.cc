// libtorch's intra-op parallel loop for the hand-written kernels, so that
// they run on the threads libtorch's own operations use (its OpenMP team)
// rather than on threads of their own, which would compete with that
// team's spinning workers and cost a spawn per call.
// A C++ exception must not cross into Rust: this catches every one (the
// callback itself never throws; Rust panics are caught on the Rust side).
// Each chunk runs in the caller's floating-point mode (x86-64's MXCSR):
// training flushes denormals on its thread (bptt.rs, `FlushDenormals`),
// and the team's threads must do the same for the same speed and the same
// numbers at every thread count.
#include <ATen/Parallel.h>
#include <cstdint>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

extern "C" int programl_parallel_for(int64_t n, int64_t grain, void (*f)(void *, int64_t, int64_t), void *ctx) {
    try {
#if defined(__x86_64__)
        const unsigned int mode = _mm_getcsr();
        at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
            const unsigned int own = _mm_getcsr();
            _mm_setcsr(mode);
            f(ctx, begin, end);
            _mm_setcsr(own);
        });
#else
        at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { f(ctx, begin, end); });
#endif
        return 0;
    } catch (...) {
        return -1;
    }
}
