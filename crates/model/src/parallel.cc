// libtorch's intra-op parallel loop for the hand-written kernels, so that
// they run on the threads libtorch's own operations use (its OpenMP team)
// rather than on threads of their own, which would compete with that
// team's spinning workers and cost a spawn per call.
// A C++ exception must not cross into Rust: this catches every one (the
// callback itself never throws; Rust panics are caught on the Rust side).
#include <ATen/Parallel.h>
#include <cstdint>

extern "C" int programl_parallel_for(int64_t n, int64_t grain, void (*f)(void *, int64_t, int64_t), void *ctx) {
    try {
        at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) { f(ctx, begin, end); });
        return 0;
    } catch (...) {
        return -1;
    }
}
