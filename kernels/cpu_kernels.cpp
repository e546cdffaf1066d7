// CPU kernels: the functors of activations.cuh over the same memory-order walk as the CUDA kernels, on torch's
// CPU threads (at::parallel_for). No torch headers beyond ATen/Parallel.h and the 16-bit types, so this unit
// compiles beside activations.cpp instead of after it.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels.h"

namespace activations {
namespace {

template <class scalar_t>
using compute_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

constexpr int64_t kCpuGrain = 1 << 15;

// Calls fn(scalar_t{}) for dtype (float, double, c10::Half, c10::BFloat16).
template <class Fn>
void with_scalar_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(c10::Half{});
    case DType::BFloat16: return fn(c10::BFloat16{});
  }
}

// The CPU loops are plain loops over dense memory with branch-free bodies (selects; the float exp and expm1 of
// activations.cuh are inline), so g++ vectorizes them: -fno-trapping-math lets it evaluate both sides of a
// select. activations.py defines ACTIVATIONS_CPU_AVX2 on x86-64 machines where torch runs AVX2 kernels; then
// these loops, and only they, are compiled for AVX2 + FMA + F16C (ELU's float loop ran 3.5x faster than with the
// SSE2 baseline). `#pragma GCC ivdep`: `out` is either disjoint from the inputs or the very same memory (in
// place), never shifted, so no iteration depends on another; without it g++ would test for overlap at run time
// and run the in-place calls unvectorized.
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
// instead of once per dtype.
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

// The mask: bit k of byte b says whether element 8 b + k passes its gradient. Both loops take n elements from a
// byte boundary; the full bytes go through the vectorized loop, a last partial byte element by element.
template <class F, class scalar_t>
ACTIVATIONS_CPU_LOOP void cpu_forward_mask_loop(int64_t n, F f, const scalar_t* x, scalar_t* y, uint8_t* mask) {
  using C = compute_t<scalar_t>;
  const auto byte_of = [=](int64_t first, int count) {
    uint32_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const C v = static_cast<C>(x[first + k]);
      y[first + k] = static_cast<scalar_t>(f.forward(v));
      bits |= uint32_t(f.passes(v)) << k;
    }
    return static_cast<uint8_t>(bits);
  };
#pragma GCC ivdep
  for (int64_t byte = 0; byte < n / 8; ++byte) mask[byte] = byte_of(byte * 8, 8);
  if (n % 8 != 0) mask[n / 8] = byte_of(n / 8 * 8, static_cast<int>(n % 8));
}

template <class scalar_t>
ACTIVATIONS_CPU_LOOP void cpu_mask_backward_loop(int64_t n, MaskBackward<compute_t<scalar_t>> backward,
                                                 const scalar_t* grad_out, const uint8_t* mask, scalar_t* grad_in) {
  using C = compute_t<scalar_t>;
  const auto byte_of = [=](int64_t first, int count, uint32_t bits) {
    for (int k = 0; k < count; ++k) {
      const C g = static_cast<C>(grad_out[first + k]);  // loaded unconditionally: a select, not a branch
      grad_in[first + k] = static_cast<scalar_t>(backward(g, (bits >> k) & 1u));
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
  at::parallel_for(0, (n + 7) / 8, kCpuGrain / 8, [=](int64_t begin, int64_t end) {
    loop(begin * 8, std::min(n, end * 8) - begin * 8, begin);
  });
}

}  // namespace

void cpu_forward(Functor functor, DType dtype, const double* args, const void* x, void* y, uint8_t* mask, int64_t n) {
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = typename decltype(tag)::template type<compute_t<scalar_t>>;
      const F f(args);
      const auto* in = static_cast<const scalar_t*>(x);
      auto* out = static_cast<scalar_t*>(y);
      if (mask == nullptr) return cpu_elementwise(n, Forward<F>{f}, out, in);
      if constexpr (F::kMask) {
        for_mask_chunks(n, [=](int64_t first, int64_t count, int64_t byte) {
          cpu_forward_mask_loop(count, f, in + first, out + first, mask + byte);
        });
      }
    });
  });
}

void cpu_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_out,
                  const void* saved, void* grad_in, int64_t n) {
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = typename decltype(tag)::template type<compute_t<scalar_t>>;
      const F f(args);
      const auto* g = static_cast<const scalar_t*>(grad_out);
      const auto* s = static_cast<const scalar_t*>(saved);
      auto* out = static_cast<scalar_t*>(grad_in);
      if constexpr (F::kFromOutput) {
        if (from_output) return cpu_elementwise(n, Backward<F, true>{f}, out, g, s);
      }
      if constexpr (F::kFromInput) {
        if (!from_output) return cpu_elementwise(n, Backward<F, false>{f}, out, g, s);
      }
    });
  });
}

void cpu_double_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_grad,
                         const void* grad_out, const void* saved, void* out, int64_t n) {
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = typename decltype(tag)::template type<compute_t<scalar_t>>;
      const F f(args);
      const auto* gg = static_cast<const scalar_t*>(grad_grad);
      const auto* g = static_cast<const scalar_t*>(grad_out);
      const auto* s = static_cast<const scalar_t*>(saved);
      auto* result = static_cast<scalar_t*>(out);
      if constexpr (F::kFromOutput) {
        if (from_output) return cpu_elementwise(n, DoubleBackward<F, true>{f}, result, gg, g, s);
      }
      if constexpr (F::kFromInput) {
        if (!from_output) return cpu_elementwise(n, DoubleBackward<F, false>{f}, result, gg, g, s);
      }
    });
  });
}

void cpu_mask_backward(DType dtype, double passing, double blocked, const void* grad_out, const uint8_t* mask,
                       void* grad_in, int64_t n) {
  with_scalar_type(dtype, [&](auto storage) {
    using scalar_t = decltype(storage);
    const MaskBackward<compute_t<scalar_t>> backward(passing, blocked);
    const auto* g = static_cast<const scalar_t*>(grad_out);
    auto* out = static_cast<scalar_t*>(grad_in);
    for_mask_chunks(n, [=](int64_t first, int64_t count, int64_t byte) {
      cpu_mask_backward_loop(count, backward, g + first, mask + byte, out + first);
    });
  });
}

}  // namespace activations
