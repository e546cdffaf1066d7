// torch glue: operator schemas, checks, CPU kernels, the CUDA dispatch and the meta kernels, registered in C++.
// The math lives in activations.cuh; the CUDA kernels in activations_cuda.cu behind cuda_launch.h; the autograd
// layer in autograd.cpp (a library of its own, built side by side with this one).
//
// Compiled by activations.py with ACTIVATIONS_WITH_CUDA defined when the CUDA part is built.

// torch's headers include ATen/Functions.h (every operator's declaration, about 3 s of a cold build) unless
// AT_PER_OPERATOR_HEADERS says the per-operator headers in ATen/ops/ are included where they are needed, as we do.
#ifndef AT_PER_OPERATOR_HEADERS
#define AT_PER_OPERATOR_HEADERS
#endif
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#ifdef ACTIVATIONS_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "activations.cuh"
#include "cuda_launch.h"
#include "layout.h"

namespace activations {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------------------------
// Checks and layout

void check_input(const Tensor& t, const char* op, const char* what) {
  const auto dtype = t.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
                   "activations.", op, ": unsupported dtype torch.", c10::getDtypeNames(dtype).first, " for ", what,
                   "; supported: float32, float64, float16, bfloat16");
  TORCH_CHECK(t.layout() == at::kStrided, "activations.", op, ": ", what, " must be a dense (strided) tensor, got ",
              t.layout());
}

void check_same(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  TORCH_CHECK(a.device() == b.device(), "activations.", op, ": ", a_name, " is on ", a.device(), " but ", b_name,
              " is on ", b.device());
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "activations.", op, ": ", a_name, " has dtype ",
                   a.scalar_type(), " but ", b_name, " has dtype ", b.scalar_type());
  TORCH_CHECK(a.sym_sizes() == b.sym_sizes(), "activations.", op, ": ", a_name, " has shape ", a.sym_sizes(), " but ",
              b_name, " has shape ", b.sym_sizes());
}

// The kernels walk memory linearly. A tensor that covers one dense block (contiguous, transposed,
// channels_last, ...) is used as it is and its output gets the same strides, as torch does; anything else
// (step slices, expanded dimensions) is copied to a contiguous tensor first.
Tensor dense(const Tensor& t) { return t.is_non_overlapping_and_dense() ? t : t.contiguous(); }

int64_t mask_bytes(int64_t numel) { return (numel + 7) / 8; }

// ---------------------------------------------------------------------------------------------------------------
// CPU kernels: the same functors, over the same memory-order walk as the CUDA kernels.

template <class scalar_t>
using compute_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

constexpr int64_t kCpuGrain = 1 << 15;

// Calls fn(scalar_t{}) for t's dtype (float, double, at::Half, at::BFloat16).
template <class Fn>
void with_scalar_type(const Tensor& t, Fn&& fn) {
  switch (t.scalar_type()) {
    case at::kFloat: return fn(float{});
    case at::kDouble: return fn(double{});
    case at::kHalf: return fn(at::Half{});
    case at::kBFloat16: return fn(at::BFloat16{});
    default: TORCH_CHECK(false, "activations: unreachable dtype ", t.scalar_type());
  }
}

// The CPU loops are plain loops over dense memory with branch-free bodies (selects; the float exp and expm1 of
// activations.cuh are inline), so g++ vectorizes them: -fno-trapping-math lets it evaluate both sides of a
// select. activations.py defines ACTIVATIONS_CPU_AVX2 on x86-64 machines where torch runs AVX2 kernels; then
// these loops, and only they, are compiled for AVX2 + FMA + F16C (ELU's float loop ran 3.5x faster than with the
// SSE2 baseline; the flags on the whole file doubled its compile time). `#pragma GCC ivdep`: `out` is either
// disjoint from the inputs or the very same memory (in place), never shifted, so no iteration depends on
// another; without it g++ would test for overlap at run time and run the in-place calls unvectorized.
#ifdef ACTIVATIONS_CPU_AVX2
#define ACTIVATIONS_CPU_LOOP __attribute__((target("avx2,fma,f16c")))
#else
#define ACTIVATIONS_CPU_LOOP
#endif

// out[i] = op(in[i]...) for i < n, computed in C (float or double) and rounded once on store.
template <class C, class Op, class Out, class... In>
ACTIVATIONS_CPU_LOOP void cpu_loop(int64_t n, Op op, Out* out, const In*... in) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(op(static_cast<C>(in[i])...));
}

// The widening and rounding loops of cpu_widened: cpu_loop's conversions alone.
struct Identity {
  template <class C>
  C operator()(C v) const { return v; }
};

// float16 and bfloat16 go through the float loop a block at a time: widened into float buffers, mapped, rounded
// back. So each op's math (inlined and vectorized) is compiled once for the three dtypes computed in float
// instead of once per dtype. (In this file as it stands the loops are a small part of the compile time: with
// every loop body removed, g++ took as long.)
constexpr int64_t kWidenBlock = 2048;

template <class Op, class scalar_t, class... In, size_t... I>
void cpu_widened(int64_t n, Op op, scalar_t* out, std::index_sequence<I...>, const In*... in) {
  float inputs[sizeof...(In)][kWidenBlock];
  float result[kWidenBlock];
  for (int64_t first = 0; first < n; first += kWidenBlock) {
    const int64_t count = std::min(kWidenBlock, n - first);
    (cpu_loop<float>(count, Identity{}, inputs[I], in + first), ...);
    cpu_loop<float>(count, op, result, static_cast<const float*>(inputs[I])...);
    cpu_loop<float>(count, Identity{}, out + first, static_cast<const float*>(result));
  }
}

// op over [0, n) on torch's CPU threads. The lambda captures by value: captured references would have to be
// reloaded after every store through a byte pointer (it may alias anything).
template <class scalar_t, class Op, class... In>
void cpu_elementwise(int64_t n, Op op, scalar_t* out, const In*... in) {
  using C = compute_t<scalar_t>;
  at::parallel_for(0, n, kCpuGrain, [=](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<scalar_t, C>) {
      cpu_loop<C>(end - begin, op, out + begin, (in + begin)...);
    } else {
      cpu_widened(end - begin, op, out + begin, std::index_sequence_for<In...>{}, (in + begin)...);
    }
  });
}

// The ReLU mask: bit k of byte b says whether element 8 b + k passes its gradient. Both loops take n elements from
// a byte boundary; the full bytes go through the vectorized loop, a last partial byte element by element.
template <class scalar_t>
ACTIVATIONS_CPU_LOOP void cpu_relu_forward_mask_loop(int64_t n, const scalar_t* x, scalar_t* y, uint8_t* mask) {
  using C = compute_t<scalar_t>;
  const Relu<C> relu{};
  const auto byte_of = [=](int64_t first, int count) {
    uint32_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const C v = static_cast<C>(x[first + k]);
      y[first + k] = static_cast<scalar_t>(relu.forward(v));
      bits |= uint32_t(relu.passes_gradient(v)) << k;
    }
    return static_cast<uint8_t>(bits);
  };
#pragma GCC ivdep
  for (int64_t byte = 0; byte < n / 8; ++byte) mask[byte] = byte_of(byte * 8, 8);
  if (n % 8 != 0) mask[n / 8] = byte_of(n / 8 * 8, static_cast<int>(n % 8));
}

template <class scalar_t>
ACTIVATIONS_CPU_LOOP void cpu_relu_backward_mask_loop(int64_t n, const scalar_t* grad_out, const uint8_t* mask,
                                                      scalar_t* grad_in) {
  using C = compute_t<scalar_t>;
  const Relu<C> relu{};
  const auto byte_of = [=](int64_t first, int count, uint32_t bits) {
    for (int k = 0; k < count; ++k) {
      const C g = static_cast<C>(grad_out[first + k]);  // loaded unconditionally: a select, not a branch
      grad_in[first + k] = static_cast<scalar_t>(relu.backward(g, (bits >> k) & 1u));
    }
  };
#pragma GCC ivdep
  for (int64_t byte = 0; byte < n / 8; ++byte) byte_of(byte * 8, 8, mask[byte]);
  if (n % 8 != 0) byte_of(n / 8 * 8, static_cast<int>(n % 8), mask[n / 8]);
}

// Calls loop(first element, count, first mask byte) over [0, n) on torch's CPU threads, split at byte boundaries
// so that no two threads write one mask byte.
template <class Loop>
void for_mask_chunks(int64_t n, Loop loop) {
  at::parallel_for(0, mask_bytes(n), kCpuGrain / 8, [=](int64_t begin, int64_t end) {
    loop(begin * 8, std::min(n, end * 8) - begin * 8, begin);
  });
}

template <class scalar_t>
void cpu_relu_forward_mask(int64_t n, const scalar_t* x, scalar_t* y, uint8_t* mask) {
  for_mask_chunks(n, [=](int64_t first, int64_t count, int64_t byte) {
    cpu_relu_forward_mask_loop(count, x + first, y + first, mask + byte);
  });
}

template <class scalar_t>
void cpu_relu_backward_mask(int64_t n, const scalar_t* grad_out, const uint8_t* mask, scalar_t* grad_in) {
  for_mask_chunks(n, [=](int64_t first, int64_t count, int64_t byte) {
    cpu_relu_backward_mask_loop(count, grad_out + first, mask + byte, grad_in + first);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA dispatch

DType cuda_dtype(const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kHalf: return DType::Float16;
    default: return DType::BFloat16;
  }
}

// Runs `launch(stream)` on t's device and current stream and turns a launch error into an exception. The
// launch lambdas are generic (`auto stream`), so a build without CUDA never instantiates their calls into
// activations_cuda.cu; there CUDA tensors never get here (no CUDA kernels are registered).
template <class Launch>
void on_cuda(const Tensor& t, const char* op, Launch&& launch) {
#ifdef ACTIVATIONS_WITH_CUDA
  const c10::DeviceGuard guard(t.device());
  // c10::Stream::native_handle() gave a stream that broke CUDA graph capture with torch 2.11; this is the
  // documented way to the current stream.
  void* stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
  const char* error = launch(stream);
  TORCH_CHECK(error == nullptr, "activations.", op, ": CUDA kernel launch failed: ", error);
#else
  TORCH_CHECK(false, "activations.", op, ": this build has no CUDA kernels");
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Operators. CPU and CUDA share these; each branches to its device's kernels. The *_into functions write into
// `out`, which may be `x` itself (in-place): every kernel reads element i before it writes element i.

// `mask` is undefined when no backward needs it (no grad): then no mask is written.
void relu_into(const Tensor& x, const Tensor& out, const Tensor& mask) {
  const int64_t n = x.numel();
  if (n == 0) return;
  uint8_t* mask_ptr = mask.defined() ? mask.mutable_data_ptr<uint8_t>() : nullptr;
  if (x.is_cuda()) {
    return on_cuda(x, "relu", [&](auto stream) {
      return cuda_relu_forward(cuda_dtype(x), x.const_data_ptr(), out.mutable_data_ptr(), mask_ptr, n, stream);
    });
  }
  with_scalar_type(x, [&](auto tag) {
    using scalar_t = decltype(tag);
    const auto* in = x.const_data_ptr<scalar_t>();
    auto* y = out.mutable_data_ptr<scalar_t>();
    if (mask_ptr != nullptr) return cpu_relu_forward_mask(n, in, y, mask_ptr);
    cpu_elementwise(n, Forward<Relu<compute_t<scalar_t>>>{}, y, in);
  });
}

void elu_into(const Tensor& x, const Tensor& out, double alpha, double scale, const char* op) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cuda()) {
    return on_cuda(x, op, [&](auto stream) {
      return cuda_elu_forward(cuda_dtype(x), x.const_data_ptr(), out.mutable_data_ptr(), n, alpha, scale, stream);
    });
  }
  with_scalar_type(x, [&](auto tag) {
    using scalar_t = decltype(tag);
    const Elu<compute_t<scalar_t>> elu(alpha, scale);
    cpu_elementwise(n, Forward<decltype(elu)>{elu}, out.mutable_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>());
  });
}

// The backward's bits, 8 to a byte (sizes may be symbolic under torch.compile), or an undefined tensor without
// grad: allocating even an empty one cost a small no-grad call about 1 us on the H100 host (0.4 us on the CPU).
Tensor new_mask(const Tensor& x, bool with_mask) {
  if (!with_mask) return Tensor();
  return at::empty_symint({(x.sym_numel() + 7) / 8}, x.options().dtype(at::kByte));
}

void check_alpha(double alpha, const char* op) {
  // The number is formatted by std::to_string: streaming a double into the message crashed with torch 2.11.
  TORCH_CHECK(std::isfinite(alpha), "activations.", op, ": alpha must be a finite number, got ",
              std::to_string(alpha));
}

// Out of place: the output has the input's strides when the input is dense (see dense()).
std::tuple<Tensor, Tensor> relu_out_of_place(const Tensor& input, bool with_mask) {
  check_input(input, "relu", "input");
  const Tensor x = dense(input);
  Tensor y = at::empty_like(x);
  Tensor mask = new_mask(x, with_mask);
  relu_into(x, y, mask);
  return {y, mask};
}

Tensor relu(const Tensor& input) { return std::get<0>(relu_out_of_place(input, false)); }

std::tuple<Tensor, Tensor> relu_with_mask(const Tensor& input) { return relu_out_of_place(input, true); }

Tensor elu_out_of_place(const Tensor& input, double alpha, double scale, const char* op) {
  check_input(input, op, "input");
  check_alpha(alpha, op);
  const Tensor x = dense(input);
  Tensor y = at::empty_like(x);
  elu_into(x, y, alpha, scale, op);
  return y;
}

Tensor elu(const Tensor& input, double alpha) { return elu_out_of_place(input, alpha, 1.0, "elu"); }

Tensor selu(const Tensor& input) { return elu_out_of_place(input, kSeluAlpha, kSeluScale, "selu"); }

// In place. A tensor whose elements share memory (expanded) cannot be written in place, as in torch; one that is
// not a dense block is computed densely and copied back.
void check_writable(const Tensor& x, const char* op) {
  TORCH_CHECK(x.is_non_overlapping_and_dense() || at::has_internal_overlap(x) != at::MemOverlap::Yes,
              "activations.", op, ": unsupported operation: more than one element of the written-to tensor refers",
              " to a single memory location. Please clone() the tensor before performing the operation.");
}

template <class Compute>
void in_place(const Tensor& x, Compute&& compute_into) {
  if (x.is_non_overlapping_and_dense()) return compute_into(x, x);
  const Tensor source = x.contiguous();
  const Tensor result = at::empty_like(source);
  compute_into(source, result);
  x.copy_(result);
}

Tensor relu_with_mask_inplace(const Tensor& x, bool with_mask) {
  check_input(x, "relu_", "input");
  check_writable(x, "relu_");
  // The mask follows the memory order of x when x is dense, else of its contiguous copy; the backward lays the
  // gradient out in that order (see ReluFunction).
  Tensor mask = new_mask(x, with_mask);
  in_place(x, [&](const Tensor& in, const Tensor& out) { relu_into(in, out, mask); });
  return mask;
}

void relu_(Tensor& x) { relu_with_mask_inplace(x, false); }

Tensor relu_with_mask_(Tensor& x) { return relu_with_mask_inplace(x, true); }

void elu_inplace(Tensor& x, double alpha, double scale, const char* op) {
  check_input(x, op, "input");
  check_alpha(alpha, op);
  check_writable(x, op);
  in_place(x, [&](const Tensor& in, const Tensor& out) { elu_into(in, out, alpha, scale, op); });
}

void elu_(Tensor& x, double alpha) { elu_inplace(x, alpha, 1.0, "elu_"); }

void selu_(Tensor& x) { elu_inplace(x, kSeluAlpha, kSeluScale, "selu_"); }

// Backward. Each writes into grad_input, which is a new tensor or grad_output itself (the *_backward_ operators,
// for a gradient that autograd hands over: see can_take_result).

void relu_backward_into(const Tensor& grad_output, const Tensor& mask, const Tensor& grad_input, const char* op) {
  check_input(grad_output, op, "grad_output");
  TORCH_CHECK(grad_output.is_non_overlapping_and_dense(), "activations.", op,
              ": grad_output must be dense in the forward output's layout");
  TORCH_CHECK(mask.scalar_type() == at::kByte && mask.dim() == 1 && mask.is_contiguous() &&
                  mask.numel() == mask_bytes(grad_output.numel()),
              "activations.", op, ": mask must be the uint8 tensor of ", mask_bytes(grad_output.numel()),
              " bytes that relu_with_mask returned, got ", mask.scalar_type(), " of shape ", mask.sizes());
  TORCH_CHECK(mask.device() == grad_output.device(), "activations.", op, ": grad_output is on ",
              grad_output.device(), " but the saved mask is on ", mask.device());
  const int64_t n = grad_output.numel();
  if (n == 0) return;
  if (grad_output.is_cuda()) {
    on_cuda(grad_output, op, [&](auto stream) {
      return cuda_relu_backward(cuda_dtype(grad_output), grad_output.const_data_ptr(), mask.const_data_ptr<uint8_t>(),
                                grad_input.mutable_data_ptr(), n, stream);
    });
  } else {
    with_scalar_type(grad_output, [&](auto tag) {
      using scalar_t = decltype(tag);
      cpu_relu_backward_mask(n, grad_output.const_data_ptr<scalar_t>(), mask.const_data_ptr<uint8_t>(),
                             grad_input.mutable_data_ptr<scalar_t>());
    });
  }
}

Tensor relu_backward(const Tensor& grad_output, const Tensor& mask) {
  Tensor grad_input = at::empty_like(grad_output);
  relu_backward_into(grad_output, mask, grad_input, "relu_backward");
  return grad_input;
}

void relu_backward_(Tensor& grad_output, const Tensor& mask) {
  relu_backward_into(grad_output, mask, grad_output, "relu_backward_");
}

void check_elu_backward(const Tensor& grad_output, const Tensor& saved, double alpha, bool saved_is_output,
                        const char* op) {
  check_input(grad_output, op, "grad_output");
  check_same(grad_output, saved, op, "grad_output", "the saved tensor");
  TORCH_CHECK(!(saved_is_output && alpha < 0), "activations.", op, ": the in-place elu_ cannot be",
              " differentiated when alpha < 0 (alpha = ", std::to_string(alpha), "): its output does not tell the",
              " sign of its input. Use the out-of-place elu instead.");
}

// grad and saved are dense with the same strides.
void elu_backward_into(const Tensor& grad, const Tensor& saved, const Tensor& grad_input, double alpha, double scale,
                       bool saved_is_output, const char* op) {
  const int64_t n = saved.numel();
  if (n == 0) return;
  if (saved.is_cuda()) {
    on_cuda(saved, op, [&](auto stream) {
      return cuda_elu_backward(cuda_dtype(saved), grad.const_data_ptr(), saved.const_data_ptr(),
                               grad_input.mutable_data_ptr(), n, alpha, scale, saved_is_output, stream);
    });
  } else {
    with_scalar_type(saved, [&](auto tag) {
      using scalar_t = decltype(tag);
      const Elu<compute_t<scalar_t>> elu(alpha, scale);
      auto* out = grad_input.mutable_data_ptr<scalar_t>();
      const auto* g = grad.const_data_ptr<scalar_t>();
      const auto* from = saved.const_data_ptr<scalar_t>();
      if (saved_is_output) {
        cpu_elementwise(n, BackwardFromOutput<decltype(elu)>{elu}, out, g, from);
      } else {
        cpu_elementwise(n, BackwardFromInput<decltype(elu)>{elu}, out, g, from);
      }
    });
  }
}

Tensor elu_backward(const Tensor& grad_output, const Tensor& saved, double alpha, double scale, bool saved_is_output) {
  check_elu_backward(grad_output, saved, alpha, saved_is_output, "elu_backward");
  const Tensor s = dense(saved);
  const Tensor g = with_strides(grad_output, s.sym_strides());
  Tensor grad_input = at::empty_like(s);
  elu_backward_into(g, s, grad_input, alpha, scale, saved_is_output, "elu_backward");
  return grad_input;
}

void elu_backward_(Tensor& grad_output, const Tensor& saved, double alpha, double scale, bool saved_is_output) {
  check_elu_backward(grad_output, saved, alpha, saved_is_output, "elu_backward_");
  TORCH_CHECK(same_dense_layout(grad_output, saved),
              "activations.elu_backward_: grad_output and the saved tensor must be dense with the same strides");
  elu_backward_into(grad_output, saved, grad_output, alpha, scale, saved_is_output, "elu_backward_");
}

// ---------------------------------------------------------------------------------------------------------------
// Meta kernels: shapes and strides only, for torch.compile's fake tensors and the meta device.

Tensor relu_meta(const Tensor& input) {
  check_input(input, "relu", "input");
  return at::empty_like(dense(input));
}

std::tuple<Tensor, Tensor> relu_with_mask_meta(const Tensor& input) {
  const Tensor y = relu_meta(input);
  return {y, new_mask(y, true)};
}

Tensor elu_meta(const Tensor& input, double alpha) {
  check_input(input, "elu", "input");
  check_alpha(alpha, "elu");
  return at::empty_like(dense(input));
}

Tensor selu_meta(const Tensor& input) { return elu_meta(input, kSeluAlpha); }

void inplace_meta(Tensor& x) { check_input(x, "in-place activation", "input"); }

void elu_inplace_meta(Tensor& x, double alpha) {
  check_alpha(alpha, "elu_");
  inplace_meta(x);
}

Tensor relu_with_mask_inplace_meta(Tensor& x) {
  inplace_meta(x);
  return new_mask(x, true);
}

Tensor relu_backward_meta(const Tensor& grad_output, const Tensor& mask) {
  check_input(grad_output, "relu_backward", "grad_output");
  return at::empty_like(grad_output);
}

Tensor elu_backward_meta(const Tensor& grad_output, const Tensor& saved, double, double, bool) {
  check_input(grad_output, "elu_backward", "grad_output");
  check_same(grad_output, saved, "elu_backward", "grad_output", "the saved tensor");
  return at::empty_like(dense(saved));
}

void relu_backward_inplace_meta(Tensor& grad_output, const Tensor&) {
  check_input(grad_output, "relu_backward_", "grad_output");
}

void elu_backward_inplace_meta(Tensor& grad_output, const Tensor& saved, double alpha, double, bool saved_is_output) {
  check_elu_backward(grad_output, saved, alpha, saved_is_output, "elu_backward_");
}

}  // namespace
}  // namespace activations

// ---------------------------------------------------------------------------------------------------------------
// Registration

using namespace activations;

TORCH_LIBRARY(activations, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("elu(Tensor x, float alpha=1.0) -> Tensor");
  m.def("selu(Tensor x) -> Tensor");
  m.def("relu_(Tensor(a!) x) -> ()");
  m.def("elu_(Tensor(a!) x, float alpha=1.0) -> ()");
  m.def("selu_(Tensor(a!) x) -> ()");
  // Internal: the forwards that also return the backward's 1-bit mask, and the backward kernels (the *_backward_
  // variants write into grad_output).
  m.def("relu_with_mask(Tensor x) -> (Tensor, Tensor)");
  m.def("relu_with_mask_(Tensor(a!) x) -> Tensor");
  m.def("relu_backward(Tensor grad_output, Tensor mask) -> Tensor");
  m.def("elu_backward(Tensor grad_output, Tensor saved, float alpha, float scale, bool saved_is_output) -> Tensor");
  m.def("relu_backward_(Tensor(a!) grad_output, Tensor mask) -> ()");
  m.def("elu_backward_(Tensor(a!) grad_output, Tensor saved, float alpha, float scale, bool saved_is_output) -> ()");
}

#ifdef ACTIVATIONS_WITH_CUDA
#define ACTIVATIONS_DEVICE_KEYS(X) X(CPU) X(CUDA)
#else
#define ACTIVATIONS_DEVICE_KEYS(X) X(CPU)
#endif

#define ACTIVATIONS_REGISTER_DEVICE(KEY)          \
  TORCH_LIBRARY_IMPL(activations, KEY, m) {       \
    m.impl("relu", &relu);                        \
    m.impl("elu", &elu);                          \
    m.impl("selu", &selu);                        \
    m.impl("relu_", &relu_);                      \
    m.impl("elu_", &elu_);                        \
    m.impl("selu_", &selu_);                      \
    m.impl("relu_with_mask", &relu_with_mask);    \
    m.impl("relu_with_mask_", &relu_with_mask_);  \
    m.impl("relu_backward", &relu_backward);      \
    m.impl("elu_backward", &elu_backward);        \
    m.impl("relu_backward_", &relu_backward_);    \
    m.impl("elu_backward_", &elu_backward_);      \
  }
ACTIVATIONS_DEVICE_KEYS(ACTIVATIONS_REGISTER_DEVICE)

TORCH_LIBRARY_IMPL(activations, Meta, m) {
  m.impl("relu", &relu_meta);
  m.impl("elu", &elu_meta);
  m.impl("selu", &selu_meta);
  m.impl("relu_", &inplace_meta);
  m.impl("elu_", &elu_inplace_meta);
  m.impl("selu_", &inplace_meta);
  m.impl("relu_with_mask", &relu_with_mask_meta);
  m.impl("relu_with_mask_", &relu_with_mask_inplace_meta);
  m.impl("relu_backward", &relu_backward_meta);
  m.impl("elu_backward", &elu_backward_meta);
  m.impl("relu_backward_", &relu_backward_inplace_meta);
  m.impl("elu_backward_", &elu_backward_inplace_meta);
}
