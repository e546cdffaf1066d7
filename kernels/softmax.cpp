// Softmax and log_softmax: the operators' schemas and their CPU, CUDA and Meta kernels (the CPU loops are here
// too; the CUDA kernels are in softmax.cu, the autograd layer and batching rule in softmax_autograd.cpp).
//
//   softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor        as torch.softmax (x converted to dtype first)
//   log_softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor    as torch.log_softmax
//   softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor       y * (g - sum(g * y))
//   log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor   g - exp(y) * sum(g)
//
// The backward operators work from the forward's output, as torch's _softmax_backward_data does. Every result is
// contiguous; an input that is not is copied first.
//
// Compiled as part of activations.cpp's unit (included at its end, sharing its helpers: check_input, check_same,
// dtype_of, on_cuda): a unit of its own parsed torch's headers again, 8-10 s of a 2-core cold build.
#include <ATen/Parallel.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "softmax.h"

namespace activations {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------------------------
// CPU loops: rows (inner == 1) one at a time, columns (inner > 1) a whole [n, inner] slab at a time so the inner
// loops run along memory. Computed in float (double for float64), as on CUDA.

template <class C>
C max_nan(C a, C b) {
  return (a > b || a != a) ? a : b;  // a NaN in the row makes the whole row NaN, as in torch
}

template <class S>
using compute_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// The sums' type: wider than the compute type, so that a long row's sum does not lose ~sqrt(n) ulp.
template <class S>
using sum_t = std::conditional_t<std::is_same_v<S, double>, long double, double>;

template <class S>
void cpu_forward(bool log, SoftmaxShape shape, const S* x, S* y) {
  using C = compute_t<S>;
  const int64_t n = shape.n, inner = shape.inner;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * inner));
  at::parallel_for(0, shape.outer, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> m(inner);
    std::vector<sum_t<S>> s(inner);
    for (int64_t o = begin; o < end; ++o) {
      const S* xo = x + o * n * inner;
      S* yo = y + o * n * inner;
      std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
      std::fill(s.begin(), s.end(), sum_t<S>(0));
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i) m[i] = max_nan(m[i], static_cast<C>(xo[j * inner + i]));
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i) s[i] += std::exp(static_cast<C>(xo[j * inner + i]) - m[i]);
      }
      if (log) {
        for (int64_t i = 0; i < inner; ++i) s[i] = std::log(s[i]);
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i) {
          const C v = static_cast<C>(xo[j * inner + i]) - m[i];
          const C total = static_cast<C>(s[i]);
          yo[j * inner + i] = static_cast<S>(log ? v - total : std::exp(v) / total);
        }
      }
    }
  });
}

template <class S>
void cpu_backward(bool log, SoftmaxShape shape, const S* g, const S* y, S* gi) {
  using C = compute_t<S>;
  const int64_t n = shape.n, inner = shape.inner;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * inner));
  at::parallel_for(0, shape.outer, grain, [&](int64_t begin, int64_t end) {
    std::vector<sum_t<S>> d(inner);
    for (int64_t o = begin; o < end; ++o) {
      const int64_t offset = o * n * inner;
      std::fill(d.begin(), d.end(), sum_t<S>(0));
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t k = offset + j * inner + i;
          d[i] += log ? static_cast<C>(g[k]) : static_cast<C>(g[k]) * static_cast<C>(y[k]);
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t k = offset + j * inner + i;
          const C gk = static_cast<C>(g[k]), yk = static_cast<C>(y[k]);
          const C dot = static_cast<C>(d[i]);
          gi[k] = static_cast<S>(log ? gk - std::exp(yk) * dot : yk * (gk - dot));
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Checks, shapes, devices

template <class Fn>
void with_scalar_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(c10::Half{});
    case DType::BFloat16: return fn(c10::BFloat16{});
  }
}

// [outer, n, inner] of a contiguous tensor reduced over dim (a 0-d tensor is one row of one element).
SoftmaxShape shape_of(const Tensor& t, int64_t dim) {
  SoftmaxShape shape{1, 1, 1};
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) shape.outer *= t.size(d);
    if (d == dim) shape.n = t.size(d);
    if (d > dim) shape.inner *= t.size(d);
  }
  return shape;
}

// Scratch memory for the CUDA kernels, from torch's allocator (empty when they need none).
Tensor cuda_workspace(const Tensor& like, int64_t bytes) {
  return at::empty({std::max<int64_t>(bytes, 0)}, like.options().dtype(at::kByte));
}

// ---------------------------------------------------------------------------------------------------------------
// The kernels (kCompute false: Meta, shapes only).

template <bool kCompute, bool kLog>
Tensor forward_kernel(const Tensor& input, int64_t dim, std::optional<at::ScalarType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  const Tensor converted = dtype.has_value() ? input.to(*dtype) : input;
  check_input(converted, op, "input", " (or pass dtype= to convert the input)");
  const int64_t d = c10::maybe_wrap_dim(dim, converted.dim());
  const Tensor x = converted.contiguous();
  Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  if constexpr (kCompute) {
    if (x.numel() == 0) return y;
    const SoftmaxShape shape = shape_of(x, d);
    const DType type = dtype_of(x);
    if (x.is_cuda()) {
      on_cuda(x, op, [&](auto stream) {
        const Tensor work = cuda_workspace(
            x, cuda_softmax_workspace_bytes(false, type, shape, x.const_data_ptr(), nullptr, y.const_data_ptr()));
        return cuda_softmax_forward(kLog, type, shape, x.const_data_ptr(), y.mutable_data_ptr(), work.data_ptr(),
                                    stream);
      });
    } else {
      with_scalar_type(type, [&](auto s) {
        using S = decltype(s);
        cpu_forward<S>(kLog, shape, x.const_data_ptr<S>(), y.mutable_data_ptr<S>());
      });
    }
  }
  return y;
}

template <bool kCompute, bool kLog>
Tensor backward_kernel(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  const char* op = kLog ? "log_softmax_backward" : "softmax_backward";
  check_input(grad_output, op, "grad_output", " (or pass dtype= to convert the input)");
  check_input(output, op, "output", " (or pass dtype= to convert the input)");
  check_same(grad_output, output, op, "grad_output", "output");
  const int64_t d = c10::maybe_wrap_dim(dim, output.dim());
  const Tensor g = grad_output.contiguous(), y = output.contiguous();
  Tensor gi = at::empty_like(y, at::MemoryFormat::Contiguous);
  if constexpr (kCompute) {
    if (y.numel() == 0) return gi;
    const SoftmaxShape shape = shape_of(y, d);
    const DType type = dtype_of(y);
    if (y.is_cuda()) {
      on_cuda(y, op, [&](auto stream) {
        const Tensor work = cuda_workspace(y, cuda_softmax_workspace_bytes(true, type, shape, g.const_data_ptr(),
                                                                           y.const_data_ptr(), gi.const_data_ptr()));
        return cuda_softmax_backward(kLog, type, shape, g.const_data_ptr(), y.const_data_ptr(), gi.mutable_data_ptr(),
                                     work.data_ptr(), stream);
      });
    } else {
      with_scalar_type(type, [&](auto s) {
        using S = decltype(s);
        cpu_backward<S>(kLog, shape, g.const_data_ptr<S>(), y.const_data_ptr<S>(), gi.mutable_data_ptr<S>());
      });
    }
  }
  return gi;
}

template <bool kCompute>
void register_softmax_kernels(torch::Library& m) {
  m.impl("softmax", TORCH_FN((forward_kernel<kCompute, false>)));
  m.impl("log_softmax", TORCH_FN((forward_kernel<kCompute, true>)));
  m.impl("softmax_backward", TORCH_FN((backward_kernel<kCompute, false>)));
  m.impl("log_softmax_backward", TORCH_FN((backward_kernel<kCompute, true>)));
}

}  // namespace
}  // namespace activations

TORCH_LIBRARY_FRAGMENT(activations, m) {
  m.def("softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  m.def("log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(activations, CPU, m) { activations::register_softmax_kernels<true>(m); }
#ifdef ACTIVATIONS_WITH_CUDA
TORCH_LIBRARY_IMPL(activations, CUDA, m) { activations::register_softmax_kernels<true>(m); }
#endif
TORCH_LIBRARY_IMPL(activations, Meta, m) { activations::register_softmax_kernels<false>(m); }
