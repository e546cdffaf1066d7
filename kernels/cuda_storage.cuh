// The dispatch on dtype to its CUDA storage type, which the elementwise (cuda_kernels.cuh) and the softmax
// (softmax_launch.cuh) CUDA launchers share, and the elementwise kernels' alignment test for 16-byte vector loads
// and stores (softmax's rows need only the same address mod 16 in every operand: vectors_line_up).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdint.h>

#include "kernels.h"

namespace activations {

// Calls fn(S{}) with the storage type S of dtype; fn returns nullptr or an error string.
template <class Fn>
const char* with_storage_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(__half{});
    case DType::BFloat16: return fn(__nv_bfloat16{});
  }
  return "activations: unknown dtype code";
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace activations
