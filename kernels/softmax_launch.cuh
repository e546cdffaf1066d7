// Softmax's CUDA entry points per (storage type, direction), declared for the dispatcher (softmax.cu) and defined
// in softmax_kernels.cuh, which only the generated units softmax_<type>_<direction>.cu include: nvcc compiles a
// template's kernels wherever its definition is visible, and in one unit softmax's kernels took 29.7 s of a
// 32.2 s cold build on the H100 host (16 cores).
#pragma once

#include "cuda_storage.cuh"
#include "softmax.h"

namespace activations {
namespace softmax_cuda {

// Forward: a = x, b unused (null); backward: a = grad_out, b = output. The workspace a call over these operands needs.
template <class S, bool kBackward>
int64_t softmax_workspace(SoftmaxShape shape, const void* a, const void* b, const void* out);

template <class S, bool kBackward>
const char* softmax_run(bool log, SoftmaxShape shape, const void* a, const void* b, void* out, void* workspace,
                        void* stream);

}  // namespace softmax_cuda
}  // namespace activations
