// Checks expm1_nonpositive (kernels/activations.cuh) on every float x <= 0, from -0.0 to -inf, against double
// expm1: the largest error in ulps of the float result and the sign of every result; then the float tanh_of, built
// on the same expm1, on every float x >= 0 (and -x: tanh is odd, NaN stays NaN) against double tanh. About ten
// minutes on one core. The GPU runs the same code (explicit fmaf, no other multiply-add that a compiler could
// fuse), so this bounds both devices. Last, that the CPU's exp_nonpositive (softmax's exp) gives host_float::exp's
// bits on every float x <= 0, and NaN for NaN.
//
//   g++ -O2 tools/expm1_exhaustive.cpp -o /tmp/expm1_exhaustive && /tmp/expm1_exhaustive
#include <cfloat>
#include <cstdio>

#include "../kernels/activations.cuh"

using activations::expm1_nonpositive;
using activations::float_from_bits;
namespace host_float = activations::host_float;
using activations::tanh_of;

// |got - want| in ulps of float at want (the subnormal spacing below the smallest normal).
double ulp_error(float got, double want) {
  if (want == 0) return got == 0 ? 0 : 1e30;
  int exponent;
  std::frexp(want, &exponent);
  const double ulp = std::fabs(want) < FLT_MIN ? std::ldexp(1.0, -149) : std::ldexp(1.0, exponent - 24);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

int main() {
  double worst = 0;
  float worst_x = 0;
  for (uint32_t bits = 0x80000000u;; ++bits) {  // -0.0, then every negative float up to -inf
    const float x = float_from_bits(bits);
    const float got = expm1_nonpositive(x);
    const double want = std::expm1(static_cast<double>(x));
    if (std::signbit(got) != std::signbit(want)) {
      std::printf("FAIL: sign of expm1(%a): got %a\n", x, got);
      return 1;
    }
    const double error = ulp_error(got, want);
    if (error > worst) worst = error, worst_x = x;
    if (bits == 0xff800000u) break;
  }
  std::printf("expm1, every float x <= 0: largest error %.3f ulp, at x = %a (%g)\n", worst, worst_x, worst_x);
  for (uint32_t bits = 0x80000000u;; ++bits) {  // exp_nonpositive, softmax's exp, against exp: the same bits
    const float x = float_from_bits(bits);
    const float got = host_float::exp_nonpositive(x), want = host_float::exp(x);
    if (!(got == want || (got != got && want != want)) || std::signbit(got) != std::signbit(want)) {
      std::printf("FAIL: exp_nonpositive(%a) = %a, exp gives %a\n", x, got, want);
      return 1;
    }
    if (bits == 0xff800000u) break;
  }
  if (host_float::exp_nonpositive(-NAN) == host_float::exp_nonpositive(-NAN)) {
    std::printf("FAIL: exp_nonpositive(NaN) is not NaN\n");
    return 1;
  }
  std::printf("exp_nonpositive, every float x <= 0: exp's results\n");
  double tanh_worst = 0;
  float tanh_worst_x = 0;
  for (uint32_t bits = 0;; ++bits) {  // +0.0, then every positive float up to +inf, then the NaNs
    const float x = float_from_bits(bits);
    const float got = tanh_of(x), got_negative = tanh_of(-x);
    if (x != x) {
      if (got == got || got_negative == got_negative) {
        std::printf("FAIL: tanh(%a) is not NaN\n", x);
        return 1;
      }
    } else {
      const double want = std::tanh(static_cast<double>(x));
      if (std::signbit(got) != std::signbit(want) || got_negative != -got || !std::signbit(got_negative)) {
        std::printf("FAIL: tanh(%a) = %a, tanh(-x) = %a\n", x, got, got_negative);
        return 1;
      }
      const double error = ulp_error(got, want);
      if (error > tanh_worst) tanh_worst = error, tanh_worst_x = x;
    }
    if (bits == 0x7fffffffu) break;
  }
  std::printf("tanh, every float: largest error %.3f ulp, at x = %a (%g)\n", tanh_worst, tanh_worst_x, tanh_worst_x);
  return worst <= 1.0 && tanh_worst <= 3.0 ? 0 : 1;
}
