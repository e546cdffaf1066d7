// Checks expm1_nonpositive (kernels/activations.cuh) on every float x <= 0, from -0.0 to -inf, against double
// expm1: the largest error in ulps of the float result and the sign of every result. About two minutes on one core.
// The GPU runs the same code (explicit fmaf, no other multiply-add that a compiler could fuse), so this bounds
// both devices.
//
//   g++ -O2 tools/expm1_exhaustive.cpp -o /tmp/expm1_exhaustive && /tmp/expm1_exhaustive
#include <cfloat>
#include <cstdio>

#include "../kernels/activations.cuh"

using activations::expm1_nonpositive;
using activations::float_from_bits;

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
  std::printf("every float x <= 0: largest error %.3f ulp, at x = %a (%g)\n", worst, worst_x, worst_x);
  return worst <= 1.0 ? 0 : 1;
}
