// The boundary between the torch glue (activations.cpp, compiled by g++) and the CUDA kernels
// (activations_cuda.cu, compiled by nvcc). Plain types only, so the .cu file needs no torch headers, which keeps
// nvcc fast (DESIGN.md: 142 s with <torch/extension.h>, under 3 s without).
//
// Every launcher takes dense buffers of n elements walked in memory order, runs on `stream` (a cudaStream_t) on
// the current device, and returns nullptr on success or the CUDA error string of a failed launch.
#pragma once

#include <stdint.h>

namespace activations {

enum class DType : int { Float32, Float64, Float16, BFloat16 };

// y = relu(x); when mask is not null also writes the backward's bit per element (bit i of byte i / 8).
const char* cuda_relu_forward(DType dtype, const void* x, void* y, uint8_t* mask, int64_t n, void* stream);
// grad_in = grad_out where the mask bit is set, 0 elsewhere.
const char* cuda_relu_backward(DType dtype, const void* grad_out, const uint8_t* mask, void* grad_in, int64_t n,
                               void* stream);
// y = elu(x) with the given alpha and scale (selu is elu with torch's constants).
const char* cuda_elu_forward(DType dtype, const void* x, void* y, int64_t n, double alpha, double scale,
                             void* stream);
// grad_in = grad_out * elu'(x), computed from `saved`, which is the forward's output or its input.
const char* cuda_elu_backward(DType dtype, const void* grad_out, const void* saved, void* grad_in, int64_t n,
                              double alpha, double scale, bool saved_is_output, void* stream);

}  // namespace activations
