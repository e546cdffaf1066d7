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

// elu(x) = scale * x for x > 0, scale * alpha * expm1(x) for x <= 0 (expm1 keeps accuracy near zero).
// SELU is ELU with torch's fixed alpha and scale. The coefficients are formed in T as torch forms them, so
// results match torch's kernels bit for bit wherever the libm functions agree.
template <class T>
struct Elu {
  T negative_coef;  // alpha * scale
  T positive_coef;  // scale

  ACTIVATION_FN Elu(double alpha, double scale) : negative_coef(T(alpha) * T(scale)), positive_coef(T(scale)) {}

  ACTIVATION_FN T forward(T x) const { return x <= T(0) ? expm1_of(x) * negative_coef : x * positive_coef; }

  // d elu / dx from the input: scale * alpha * exp(x) for x <= 0, scale otherwise.
  ACTIVATION_FN T backward_from_input(T grad, T x) const {
    return x <= T(0) ? grad * negative_coef * exp_of(x) : grad * positive_coef;
  }

  // The same derivative from the output y: for x <= 0, scale * alpha * exp(x) = y + scale * alpha. Valid for
  // alpha >= 0, where y <= 0 exactly when x <= 0; the autograd layer saves the input instead when alpha < 0.
  ACTIVATION_FN T backward_from_output(T grad, T y) const {
    return y <= T(0) ? grad * (y + negative_coef) : grad * positive_coef;
  }
};

}  // namespace activations
