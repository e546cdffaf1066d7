// The boundary between the torch glue (activations.cpp) and the kernels of both devices: cpu_kernels.cpp
// (g++, no torch headers but ATen/Parallel.h) and cuda_kernels.cu (nvcc, pure CUDA). Plain types only, so the
// kernel files compile fast (DESIGN.md: 142 s of nvcc with <torch/extension.h>, under 3 s without) and side by
// side.
//
// Every function maps dense buffers of n elements walked in memory order (or one operand in rows: Rows below):
// element i of one operand pairs with element i of the others, and `out` is either a buffer of its own or the very
// first operand (in place). The activation is `functor` (op_table.h) built from `args` (the op table's layout of
// its arguments). The CUDA functions run on `stream` (a cudaStream_t) on the current device and return nullptr on
// success or the CUDA error string of a failed launch; the CPU ones run on torch's CPU threads.
#pragma once

#include <stdint.h>

#include "activations.cuh"
#include "op_table.h"

namespace activations {

enum class DType : int { Float32, Float64, Float16, BFloat16 };

// Where an operand's elements lie when it is not one dense block: rows of `length` elements, each dense, every row
// `stride` elements after the one before (stride > length), in the order of a contiguous tensor of its shape. A
// slice of a contiguous tensor's last dimensions lies so (either half of a fused gate-and-up projection,
// x.chunk(2, -1)): the kernels walk it where it lies, where a contiguous copy of it would cost another pass over
// memory. length 0: the operand is dense.
struct Rows {
  int64_t length = 0;
  int64_t stride = 0;
};

// y = f(x); with a mask (piecewise-linear functors only), also the backward's bit per element (bit i of byte
// i / 8: whether the gradient of element i is multiplied by `passing` rather than `blocked`). On CUDA x may lie in
// x_rows (out of place, fewer than 2^31 elements).
const char* cuda_forward(Functor functor, DType dtype, const double* args, const void* x, void* y, uint8_t* mask,
                         int64_t n, void* stream, Rows x_rows = {});
// x_rows: x's rows, where x is not dense; y_rows: y's (y is dense or, in place, x).
void cpu_forward(Functor functor, DType dtype, const double* args, const void* x, void* y, uint8_t* mask, int64_t n,
                 Rows x_rows = {}, Rows y_rows = {});

// grad_in = grad_out * f'(saved), saved being the forward's input or (from_output) its output.
const char* cuda_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_out,
                          const void* saved, void* grad_in, int64_t n, void* stream, Rows saved_rows = {});
// saved_rows: saved's rows, where it is not dense (grad_out and grad_in are).
void cpu_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_out,
                  const void* saved, void* grad_in, int64_t n, Rows saved_rows = {});

// out = grad_grad * grad_out * f''(saved): the derivative of the backward with respect to what it saved (from
// the output: the derivative of f' written in y, with respect to y).
const char* cuda_double_backward(Functor functor, DType dtype, const double* args, bool from_output,
                                 const void* grad_grad, const void* grad_out, const void* saved, void* out, int64_t n,
                                 void* stream);
void cpu_double_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_grad,
                         const void* grad_out, const void* saved, void* out, int64_t n);

// grad_in = grad_out * (bit ? passing : blocked): the backward of the piecewise-linear functors.
const char* cuda_mask_backward(DType dtype, double passing, double blocked, const void* grad_out, const uint8_t* mask,
                               void* grad_in, int64_t n, void* stream);
void cpu_mask_backward(DType dtype, double passing, double blocked, const void* grad_out, const uint8_t* mask,
                       void* grad_in, int64_t n);

// fn(FunctorTag<F>{}) for the functor F that `functor` names; FunctorTag<F>::type<T, k16BitResult> is F.
template <template <class, bool> class F>
struct FunctorTag {
  template <class T, bool k16BitResult = false>
  using type = F<T, k16BitResult>;
};

template <class Fn>
decltype(auto) with_functor(Functor functor, Fn&& fn) {
  switch (functor) {
#define ACTIVATIONS_FUNCTOR_CASE(F) \
  case Functor::F:                  \
    return fn(FunctorTag<F>{});
    ACTIVATIONS_FOR_EACH_FUNCTOR(ACTIVATIONS_FUNCTOR_CASE)
#undef ACTIVATIONS_FUNCTOR_CASE
  }
  return fn(FunctorTag<Relu>{});  // not reached: every Functor has its case
}

}  // namespace activations
