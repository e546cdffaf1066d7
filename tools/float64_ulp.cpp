// The float64 CPU math of kernels/activations.cuh against quad precision (libquadmath, 113 bits): the largest
// error in ulps over random inputs of every sign and magnitude, with the special values, as test_activations.py
// counts them (the ulp of double at the exact result; GELU's backward relative to the size of its terms Phi and
// |x phi|, and results below 2^-100 in absolute terms, as the tests' floors).
//
//   g++ -std=gnu++17 -O1 -mavx2 -mfma -fno-trapping-math -I kernels tools/float64_ulp.cpp -lquadmath -o /tmp/f64ulp
//   /tmp/f64ulp [samples, default 4000000]
#include <float.h>
#include <quadmath.h>
#include <stdio.h>
#include <stdlib.h>

#include <random>
#include <vector>

#include "activations.cuh"

using namespace activations;
using Quad = __float128;

// |actual - exact| in ulps of double at max(|exact|, floor); 0 where both are the same NaN, infinity or zero.
static double ulps(double actual, Quad exact, double floor = 0.0) {
  const double rounded = static_cast<double>(exact);
  if (isnan(actual) || isnan(rounded)) return isnan(actual) == isnan(rounded) ? 0.0 : INFINITY;
  if (isinf(rounded) || isinf(actual)) return actual == rounded ? 0.0 : INFINITY;
  Quad magnitude = fabsq(exact) > floor ? fabsq(exact) : floor;
  if (magnitude < 0x1p-1022Q) magnitude = 0x1p-1022Q;
  int exponent;
  frexpq(magnitude, &exponent);
  return static_cast<double>(fabsq(actual - exact) / ldexpq(1.0Q, exponent - 53));
}

struct Worst {
  const char* what;
  double error = 0.0, at = 0.0;
  void add(double e, double x) {
    if (e > error || e != e) error = e, at = x;
  }
  void print() const { printf("%-34s %8.3f ulp at x = %.17g\n", what, error, at); }
};

// Inputs: specials, then a mix of normal(0, 3), uniform on [-45, 45], +-2^uniform(-1074, 1024) and random bit
// patterns (NaNs among them).
static std::vector<double> inputs(size_t n) {
  std::vector<double> v = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0x1p-1074, -0x1p-1074, 0x1p-1022, -0x1p-1022,
                           DBL_MAX, -DBL_MAX, 1.0, -1.0, 20.0, 5.0, 2.5, 0.46875 * M_SQRT2, -0.46875 * M_SQRT2,
                           4 * M_SQRT2, -4 * M_SQRT2, -37.5, -38.5, -40.0};
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_real_distribution<double> uniform(-45.0, 45.0), exponent(-1074.0, 1024.0);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0: v.push_back(normal(rng)); break;
      case 1: v.push_back(uniform(rng)); break;
      case 2: v.push_back((rng() & 1 ? -1.0 : 1.0) * exp2(exponent(rng))); break;
      default: {
        const uint64_t bits = rng();
        v.push_back(host_double::from_bits(bits));
      }
    }
  }
  return v;
}

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? strtoull(argv[1], nullptr, 10) : 4000000;
  const std::vector<double> xs = inputs(n);
  const Quad sqrt1_2 = M_SQRT1_2q, inv_sqrt_2pi = M_SQRT1_2q / sqrtq(M_PIq);

  // exp over the inputs and over uniform(-746, 710); exp_nonpositive and expm1_nonpositive over the inputs made
  // non-positive and over uniform(-746, 0) and uniform(-40, 0) (where expm1's result is not yet -1); expm1_nonpositive
  // leaves NaN to its callers.
  {
    Worst exp_worst{"host_double::exp"}, exp_nonpositive_worst{"host_double::exp_nonpositive"},
        expm1_worst{"host_double::expm1_nonpositive"};
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> whole(-746.0, 710.0), nonpositive(-746.0, 0.0), near(-40.0, 0.0);
    for (size_t i = 0; i < xs.size(); ++i) {
      for (const double x : {xs[i], whole(rng)}) exp_worst.add(ulps(host_double::exp(x), expq(x)), x);
      for (const double x : {-fabs(xs[i]), nonpositive(rng)}) {
        exp_nonpositive_worst.add(ulps(host_double::exp_nonpositive(x), expq(x)), x);
      }
      for (const double x : {-fabs(xs[i]), near(rng)}) {
        if (x == x) expm1_worst.add(ulps(host_double::expm1_nonpositive(x), expm1q(x)), x);  // NaN gives 0 there
      }
    }
    exp_worst.print();
    exp_nonpositive_worst.print();
    expm1_worst.print();
  }
  // log1p over the inputs, and over -1 + 2^uniform(-60, 1) (near -1, and across k = 0 and its neighbours).
  {
    Worst worst{"host_double::log1p"};
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> exponent(-60.0, 1.0);
    for (size_t i = 0; i < xs.size(); ++i) {
      for (const double u : {xs[i], -1.0 + exp2(exponent(rng))}) worst.add(ulps(host_double::log1p(u), log1pq(u)), u);
    }
    worst.print();
  }
  // GELU (exact form): x Phi(x) and Phi(x) + x phi(x).
  {
    const double args[1] = {0.0};
    const Gelu<double> gelu(args);
    Worst forward{"gelu forward"}, backward{"gelu backward"};
    for (double x : xs) {
      const Quad q = x;
      const Quad cdf = 0.5Q * erfcq(-q * sqrt1_2), pdf = expq(-0.5Q * q * q) * inv_sqrt_2pi;
      const Quad scale = cdf + fabsq(q * pdf);
      forward.add(ulps(gelu.forward(x), q * cdf, 0x1p-100), x);
      backward.add(ulps(gelu.backward(1.0, x), cdf + q * pdf, fmax(static_cast<double>(scale), 0x1p-100)), x);
    }
    forward.print();
    backward.print();
  }
  // softplus: log1p(exp(beta x)) / beta, x past the threshold; sigmoid(beta x).
  const double softplus_args[2][2] = {{1.0, 20.0}, {2.0, 5.0}};
  for (const double* args : softplus_args) {
    const Softplus<double> softplus(args);
    const double beta = args[0], threshold = args[1];
    char names[2][64];
    snprintf(names[0], 64, "softplus(beta %g) forward", beta);
    snprintf(names[1], 64, "softplus(beta %g) backward", beta);
    Worst forward{names[0]}, backward{names[1]};
    for (double x : xs) {
      const Quad z = static_cast<Quad>(x) * beta;
      const bool linear = x * beta > threshold;
      const Quad value = linear ? static_cast<Quad>(x) : log1pq(expq(z)) / beta;
      const Quad slope = linear ? 1.0Q : 1.0Q / (1.0Q + expq(-z));
      forward.add(ulps(softplus.forward(x), value, 0x1p-1000), x);
      backward.add(ulps(softplus.backward(1.0, x), slope, 0x1p-1000), x);
    }
    forward.print();
    backward.print();
  }
  return 0;
}
