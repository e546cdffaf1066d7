// The math of every activation, defined once. Compiled by g++ for the CPU kernels (activations.cpp) and by nvcc
// for the CUDA kernels (activations_cuda.cu). Functors work in a "compute type" T: float for float32, float16
// and bfloat16 tensors (values are widened on load and rounded once on store), double for float64.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ACTIVATION_FN __host__ __device__ __forceinline__
#else
#define ACTIVATION_FN inline
#endif

namespace activations {

ACTIVATION_FN float float_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// x - k ln2 in float, with ln2 in two parts (Cody and Waite): k * 0.693359375 is exact for every k the float exp
// and expm1 below use (|k| <= 150), so the result keeps x's low bits.
ACTIVATION_FN float minus_k_ln2(float x, float k) { return fmaf(k, 2.12194440e-4f, fmaf(k, -0.693359375f, x)); }

// expm1(x) for x <= 0, in float, on both devices: ELU's negative side. It needs no overflow handling (the result
// lies in [-1, 0]) and makes 2^k from exponent bits, so it takes about 20 instructions where CUDA's general
// expm1f takes about 30: at sizes that sit in the H100's L2 (2^20-2^22 elements) the float32 ELU forward went
// from 0.90-0.96x of torch's to 1.01-1.23x (bench.py --sweep; variants: tools/elu_forward_variants.cu).
// Branch-free (selects only), so the CPU loops vectorize. Checked on every float x <= 0 against double
// (tools/expm1_exhaustive.cpp): <= 0.88 ulp (CUDA's expm1f: <= 1 ulp), -0.0 and subnormals returned as they are,
// -inf gives -1. x > 0 and NaN give 0: ELU never uses those (they take its other side), and the CPU loops, which
// compute both sides and select, get a finite value.
ACTIVATION_FN float expm1_nonpositive(float x) {
  // Below -17.5, e^x < 2^-25 and the result rounds to -1: the clamp keeps k in [-25, 0].
  const float clamped = x < -17.5f ? -17.5f : (x < 0.0f ? x : 0.0f);
  const float k = rintf(clamped * 1.44269504088896341f);  // x = k ln2 + r, |r| <= ln2 / 2
  const float r = minus_k_ln2(clamped, k);
  // expm1(r) = r + r^2 q(r), the Taylor series to r^7: the first term left out is below 2^-26 of the result.
  const float q = fmaf(fmaf(fmaf(fmaf(fmaf(1.0f / 5040, r, 1.0f / 720), r, 1.0f / 120), r, 1.0f / 24), r, 1.0f / 6),
                       r, 0.5f);
  const float p = fmaf(r * r, q, r);
  // 2^k (1 + p) - 1 = 2^k p + (2^k - 1): 2^k - 1 is exact for these k, so the sum is rounded once.
  const float two_to_k = float_from_bits(static_cast<uint32_t>(static_cast<int>(k) + 127) << 23);
  const float result = fmaf(two_to_k, p, two_to_k - 1.0f);
  return x == 0.0f ? x : result;  // keeps -0.0 (r lost its sign)
}
ACTIVATION_FN double expm1_nonpositive(double x) { return expm1(x); }

#ifndef __CUDA_ARCH__
// exp in float for the CPU kernels (the ELU backward from the input). libm's expf is a call that g++ cannot
// vectorize; this is inline and branch-free (selects only), so the loops around it vectorize. Measured against
// long double over every 97th float: <= 0.97 ulp, with correctly signed zeros, subnormals, +-inf and NaN.
// The fused multiply-adds are written out (fmaf), as in expm1_nonpositive, rather than left to the compiler
// to contract a * b + c: it does so at -O2 but not at -O1, which activations.py compiles with.
namespace host_float {

// exp(x) = 2^k (1 + p) for x = k ln2 + r, |r| <= ln2 / 2, with 2^k returned as two factors: each is a normal
// float for every k the clamp allows, and a result in the subnormal range is then rounded once, by the second
// product.
inline float reduce(float x, float& two_to_k_a, float& two_to_k_b) {
  const float clamped = !(x >= -104.0f) ? -104.0f : (x > 89.0f ? 89.0f : x);  // NaN goes to -104: see exp
  const float rounder = 12582912.0f;                                          // 1.5 * 2^23: adding it rounds
  const float k = fmaf(clamped, 1.44269504088896341f, rounder) - rounder;     // round(x / ln2)
  const float r = minus_k_ln2(clamped, k);
  const int k_int = static_cast<int>(k);
  two_to_k_a = float_from_bits(static_cast<uint32_t>((k_int >> 1) + 127) << 23);
  two_to_k_b = float_from_bits(static_cast<uint32_t>(k_int - (k_int >> 1) + 127) << 23);
  // Taylor series to r^8: the first term left out is below 2^-27 of the result.
  const float tail = fmaf(fmaf(fmaf(fmaf(fmaf(fmaf(1.0f / 40320, r, 1.0f / 5040), r, 1.0f / 720), r, 1.0f / 120), r,
                                    1.0f / 24), r, 1.0f / 6), r, 0.5f);
  return fmaf(r, r * tail, r);
}

inline float exp(float x) {
  float a, b;
  const float p = reduce(x, a, b);
  const float result = ((p + 1.0f) * a) * b;
  return x != x ? x : result;
}

}  // namespace host_float
#endif

// exp in the compute type: CUDA's on the GPU; on the CPU the vectorizable float one above and libm's for double.
#ifdef __CUDA_ARCH__
ACTIVATION_FN float exp_of(float x) { return expf(x); }
#else
ACTIVATION_FN float exp_of(float x) { return host_float::exp(x); }
#endif
ACTIVATION_FN double exp_of(double x) { return exp(x); }
ACTIVATION_FN float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
ACTIVATION_FN double fma_of(double a, double b, double c) { return fma(a, b, c); }

// expm1 for results that are rounded to float16 or bfloat16. A float's accuracy (1 ulp) is wasted there, and
// expm1f's instruction count made the half-precision ELU forward compute-bound on the H100 (79 % of the copy
// rate). This one's relative error stays below 2^-17, far under half an ulp of float16 (2^-12) or bfloat16
// (2^-9), so the rounded result is the correctly rounded one or one ulp off.
ACTIVATION_FN float expm1_for_16bit(float x) {
#ifdef __CUDA_ARCH__
  // Near zero exp(x) - 1 cancels: the Taylor series to x^3 there (relative error < x^3 / 24 < 2^-19). Both
  // are computed and one is selected: branches cost more than the few instructions each takes.
  const float taylor = x * fmaf(x, fmaf(x, 1.0f / 6.0f, 0.5f), 1.0f);
  // __expf is one ex2.approx: relative error <= (2 + 1.2 |x|) * 2^-24, magnified at most 32x by the
  // subtraction for |x| >= 1/32 (and irrelevant where exp(x) is far below 1).
  const float via_exp = __expf(x) - 1.0f;
  return fabsf(x) < 0.03125f ? taylor : via_exp;
#else
  return expm1_nonpositive(x);  // the CPU kernels use Elu<float> for 16-bit tensors too; this keeps it defined
#endif
}

// torch.selu's constants (aten/src/ATen/native/Activation.cpp).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

// relu(x) = max(x, 0). NaN propagates. -0.0 gives +0.0, as torch.relu does on CUDA (torch's CPU kernel
// returns -0.0 there; the two differ only in the sign of that zero).
template <class T>
struct Relu {
  ACTIVATION_FN T forward(T x) const { return (x > T(0) || x != x) ? x : T(0); }
  // The backward needs one bit per element: whether the gradient passes. torch's threshold_backward passes it
  // where !(x <= 0), so NaN inputs pass their gradient and +-0.0 block it. This bit is what the forward saves.
  ACTIVATION_FN bool passes_gradient(T x) const { return !(x <= T(0)); }
  ACTIVATION_FN T backward(T grad, bool passes) const { return passes ? grad : T(0); }
};

// A real coefficient c (alpha * scale, or scale) held as hi + lo in T, so that c * v is rounded once, as if c
// were exact: rounding alpha = 0.3 to float alone costs up to half an ulp in every result.
template <class T>
struct Coefficient {
  T hi, lo;
  ACTIVATION_FN explicit Coefficient(double c) : hi(T(c)), lo(T(c - double(T(c)))) {}
  ACTIVATION_FN T times(T v) const {
    const T product = fma_of(v, hi, v * lo);
    // For v = +-0 (the sum loses zero's sign) and v = +-inf (inf * lo can be NaN): the plain product.
    return (v != T(0) && product == product) ? product : v * hi;
  }
};

// elu(x) = scale * x for x > 0, scale * alpha * expm1(x) for x <= 0 (expm1 keeps accuracy near zero).
// SELU is ELU with torch's fixed alpha and scale. NaN takes the x > 0 branch, as in torch's kernels.
// T is the compute type; k16BitResult says the result is rounded to a 16-bit type (see expm1_for_16bit).
template <class T, bool k16BitResult = false>
struct Elu {
  Coefficient<T> negative;  // alpha * scale
  Coefficient<T> positive;  // scale

  ACTIVATION_FN Elu(double alpha, double scale) : negative(alpha * scale), positive(scale) {}

  ACTIVATION_FN T forward(T x) const {
    if constexpr (k16BitResult) {
      // Both sides, then a select: branch-free, as the cheap exponential allows (see expm1_for_16bit). The
      // coefficients' lo parts are below a 16-bit result's precision: plain products.
      const T negative_side = negative.hi * expm1_for_16bit(x);
      const T positive_side = positive.hi * x;
      return x <= T(0) ? negative_side : positive_side;
    }
    return x <= T(0) ? negative.times(expm1_nonpositive(x)) : positive.times(x);
  }

  // d elu / dx from the input: scale * alpha * exp(x) for x <= 0, scale otherwise.
  ACTIVATION_FN T backward_from_input(T grad, T x) const {
    return x <= T(0) ? negative.times(grad * exp_of(x)) : positive.times(grad);
  }

  // The same derivative from the output y, for the in-place variants whose input is gone: for x <= 0,
  // scale * alpha * exp(x) = y + scale * alpha. Valid for alpha >= 0, where y <= 0 exactly when x <= 0 (the
  // operator refuses alpha < 0). It cancels where elu flattens out, as torch's elu_ backward does.
  ACTIVATION_FN T backward_from_output(T grad, T y) const {
    return y <= T(0) ? grad * ((y + negative.hi) + negative.lo) : positive.times(grad);
  }
};

// The per-element operations the elementwise kernels of both devices map: compute-type values in, compute-type
// value out. Named types (not lambdas), so that CPU kernels of different storage types share one instantiation.
template <class F>
struct Forward {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C x) const { return f.forward(x); }
};
template <class F>
struct BackwardFromInput {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C grad, C x) const { return f.backward_from_input(grad, x); }
};
template <class F>
struct BackwardFromOutput {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C grad, C y) const { return f.backward_from_output(grad, y); }
};

}  // namespace activations
