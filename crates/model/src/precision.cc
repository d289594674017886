// libtorch's FP32 matmul precision on the CPU, which tch does not bind.
// With BF16 set, oneDNN runs FP32 matmuls in BF16 where the CPU has the
// instructions (AVX512-BF16, AMX) and libtorch keeps FP32 elsewhere.
// Every function catches: a C++ exception must not cross into Rust.
#include <ATen/Context.h>

extern "C" int programl_set_matmul_bf16(int on) {
    try {
        at::globalContext().setFloat32Precision(at::Float32Backend::MKLDNN, at::Float32Op::MATMUL,
                                                on ? at::Float32Precision::BF16 : at::Float32Precision::NONE);
        return 0;
    } catch (...) {
        return -1;
    }
}

extern "C" int programl_matmul_bf16(void) {
    try {
        return at::globalContext().float32Precision(at::Float32Backend::MKLDNN, at::Float32Op::MATMUL) ==
               at::Float32Precision::BF16;
    } catch (...) {
        return -1;
    }
}
