// The math of every activation, defined once. Compiled by g++ for the CPU kernels (activations.cpp) and by nvcc
// for the CUDA kernels (activations_cuda.cu). Functors work in a "compute type" T: float for float32, float16
// and bfloat16 tensors (values are widened on load and rounded once on store), double for float64.
#pragma once

#include <math.h>

#ifdef __CUDACC__
#define ACTIVATION_FN __host__ __device__ __forceinline__
#else
#define ACTIVATION_FN inline
#endif

namespace activations {

// Overloads that pick the float or double libm function (device code has both as well).
ACTIVATION_FN float expm1_of(float x) { return expm1f(x); }
ACTIVATION_FN double expm1_of(double x) { return expm1(x); }
ACTIVATION_FN float exp_of(float x) { return expf(x); }
ACTIVATION_FN double exp_of(double x) { return exp(x); }
ACTIVATION_FN float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
ACTIVATION_FN double fma_of(double a, double b, double c) { return fma(a, b, c); }

// expm1 for results that are rounded to float16 or bfloat16. expm1f's accuracy (1 ulp of float) is wasted there,
// and its instruction count made the half-precision ELU forward compute-bound on the H100 (79 % of the copy
// rate). This one's relative error stays below 2^-17, far under half an ulp of float16 (2^-12) or bfloat16
// (2^-9), so the rounded result is the correctly rounded one or one ulp off.
ACTIVATION_FN float expm1_for_16bit(float x) {
  // Near zero exp(x) - 1 cancels: the Taylor series to x^3 there (relative error < x^3 / 24 < 2^-19). Both
  // are computed and one is selected: branches cost more than the few instructions each takes.
  const float taylor = x * fmaf(x, fmaf(x, 1.0f / 6.0f, 0.5f), 1.0f);
#ifdef __CUDA_ARCH__
  // __expf is one ex2.approx: relative error <= (2 + 1.2 |x|) * 2^-24, magnified at most 32x by the
  // subtraction for |x| >= 1/32 (and irrelevant where exp(x) is far below 1).
  const float via_exp = __expf(x) - 1.0f;
#else
  const float via_exp = expf(x) - 1.0f;
#endif
  return fabsf(x) < 0.03125f ? taylor : via_exp;
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
    return x <= T(0) ? negative.times(expm1_of(x)) : positive.times(x);
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

}  // namespace activations
