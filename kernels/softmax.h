// Softmax and log_softmax kernels: the boundary between their torch glue (softmax.cpp) and the kernels, CPU
// (softmax_cpu.cpp, part of cpu_kernels.cpp's unit) and CUDA (softmax.cu, pure CUDA). Plain types only, as
// kernels.h.
//
// A tensor made contiguous is viewed as [outer, n, inner]: the reduction runs over n. With inner == 1 every row
// is n contiguous elements (the fast paths); otherwise a column of n elements has stride `inner`.
//
//   forward:  y = softmax(x) = exp(x - max) / sum(exp(x - max))      log: y = (x - max) - log(sum(exp(x - max)))
//   backward: softmax: grad_in = y * (g - sum(g * y))                 log: grad_in = g - exp(y) * sum(g)
//
// The CUDA functions run on `stream` on the current device and return nullptr or the CUDA error string; the CPU
// ones run on torch's CPU threads.
#pragma once

#include <stdint.h>

#include "kernels.h"

namespace activations {

struct SoftmaxShape {
  int64_t outer, n, inner;
};

// Bytes of scratch memory the CUDA kernels need for this call (0 for most: rows too long for one pass over the
// registers of a block or cluster are reduced in parts first, whose partial results go there).
int64_t cuda_softmax_workspace_bytes(bool backward, DType dtype, SoftmaxShape shape, const void* a, const void* b,
                                     const void* out);

const char* cuda_softmax_forward(bool log, DType dtype, SoftmaxShape shape, const void* x, void* y, void* workspace,
                                 void* stream);
const char* cuda_softmax_backward(bool log, DType dtype, SoftmaxShape shape, const void* grad_out,
                                  const void* output, void* grad_in, void* workspace, void* stream);

void cpu_softmax_forward(bool log, DType dtype, SoftmaxShape shape, const void* x, void* y);
void cpu_softmax_backward(bool log, DType dtype, SoftmaxShape shape, const void* grad_out, const void* output,
                          void* grad_in);

}  // namespace activations
