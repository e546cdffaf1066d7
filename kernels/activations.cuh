// The math of every activation, defined once. Compiled by g++ for the CPU kernels (cpu_kernels.cpp) and by nvcc
// for the CUDA kernels (cuda_kernels.cu). Functors work in a "compute type" T: float for float32, float16
// and bfloat16 tensors (values are widened on load and rounded once on store), double for float64.
#pragma once

#include <cmath>  // std::fma, for float and double alike
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
ACTIVATION_FN uint32_t bits_of(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

#ifdef __CUDA_ARCH__
// rcp.approx.ftz.f32, one MUFU.RCP: within 1 ulp of 1 / d for d of a normal reciprocal (0 past 2^126).
__device__ __forceinline__ float approximate_reciprocal(float d) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return r;
}
#endif

// 1 / d rounded to nearest, for 1 <= d < 2^126 (NaN for NaN): the same bits as the division, on both devices. On
// the GPU the division's own fast path written out, an approximate reciprocal (rcp.approx, within 1 ulp) and one
// Newton step by fma: nvcc's division takes exactly these steps for every such d, and a range test, a branch to a
// slow path and the branch's reconvergence besides (6 instructions of about 50 an element in the float32 GELU
// forward, which ran at 86-88 % of the copy rate on the H200; tools/reciprocal_exhaustive.cu compares the two over
// every such d). On the CPU the division (vdivps; the CPU's approximate reciprocal has 14 bits, too few for one step
// to round exactly). In double the division on both devices.
ACTIVATION_FN float reciprocal_at_least_one(float d) {
#ifdef __CUDA_ARCH__
  const float r = approximate_reciprocal(d);
  return fmaf(r, fmaf(-d, r, 1.0f), r);
#else
  return 1.0f / d;
#endif
}
ACTIVATION_FN double reciprocal_at_least_one(double d) { return 1.0 / d; }

// x - k ln2 in float, with ln2 in two parts (Cody and Waite): k * 0.693359375 is exact for every k the float exp
// and expm1 below use (|k| <= 150), so the result keeps x's low bits.
ACTIVATION_FN float minus_k_ln2(float x, float k) { return fmaf(k, 2.12194440e-4f, fmaf(k, -0.693359375f, x)); }

// expm1(v) for v in [-17.5, 0] (v clamped by the caller; NaN and the sign of -0.0 are the caller's too).
// Adding 1.5 * 2^23 + 127 rounds v / ln2 to an integer k and leaves k + 127 in the sum's low mantissa bits, so
// that 2^k is the sum's bits shifted: one fused multiply-add, a subtraction and a shift where rintf, a conversion
// to int and an addition took five (the CPU's 512-bit loops issue on two ports, so instructions are time).
ACTIVATION_FN float expm1_in_range(float v) {
  const float rounder = 12583039.0f;  // 1.5 * 2^23 + 127
  const float shifted = fmaf(v, 1.44269504088896341f, rounder);
  const float k = shifted - rounder;  // v = k ln2 + r, |r| <= ln2 / 2 (and a hair more where v / ln2 rounds)
  const float r = minus_k_ln2(v, k);
  // expm1(r) = r + r^2 q(r), the Taylor series to r^7: the first term left out is below 2^-26 of the result.
  const float q = fmaf(fmaf(fmaf(fmaf(fmaf(1.0f / 5040, r, 1.0f / 720), r, 1.0f / 120), r, 1.0f / 24), r, 1.0f / 6),
                       r, 0.5f);
  const float p = fmaf(r * r, q, r);
  // 2^k (1 + p) - 1 = 2^k p + (2^k - 1): 2^k - 1 is exact for these k, so the sum is rounded once.
  const float two_to_k = float_from_bits(bits_of(shifted) << 23);
  return fmaf(two_to_k, p, two_to_k - 1.0f);
}

// expm1(x) for x <= 0, in float, on both devices: ELU's negative side. It needs no overflow handling (the result
// lies in [-1, 0]) and makes 2^k from exponent bits, so it takes about 20 instructions where CUDA's general
// expm1f takes about 30: at sizes that sit in the H100's L2 (2^20-2^22 elements) the float32 ELU forward went
// from 0.90-0.96x of torch's to 1.01-1.23x (bench.py --sweep; variants: tools/elu_forward_variants.cu).
// Branch-free (selects only), so the CPU loops vectorize. Checked on every float x <= 0 against double
// (tools/expm1_exhaustive.cpp): <= 0.872 ulp (CUDA's expm1f: <= 1 ulp), -0.0 and subnormals returned as they are,
// -inf gives -1. x > 0 and NaN give 0: ELU never uses those (they take its other side), and the CPU loops, which
// compute both sides and select, get a finite value.
ACTIVATION_FN float expm1_nonpositive(float x) {
  // Below -17.5, e^x < 2^-25 and the result rounds to -1: the clamp keeps k in [-25, 0].
  const float clamped = x < -17.5f ? -17.5f : (x < 0.0f ? x : 0.0f);
  const float result = expm1_in_range(clamped);
  return x == 0.0f ? x : result;  // keeps -0.0 (r lost its sign)
}

// What the sum m = 1 + u, rounded, lost: 1 + u = m + one_plus_error(u, m) exactly (Fast2Sum, the larger addend
// first). NaN for a NaN u.
template <class T>
ACTIVATION_FN T one_plus_error(T u, T m) {
  return u > T(1) ? T(1) - (m - u) : u - (m - T(1));
}

// Float arithmetic that both devices' kernels share: GELU's normal tail, and the pieces of it that the CPU's exp
// uses too. Fused multiply-adds are written out (fmaf), so that the CPU (-ffp-contract=off) and the GPU round at
// the same steps.
namespace float_math {

// (e^r - 1 - r) / r^2 for |r| <= ln2 / 2: a degree-5 polynomial fitted to it (SLEEF's expf coefficients).
ACTIVATION_FN float expm1_tail(float r) {
  return fmaf(fmaf(fmaf(fmaf(fmaf(0.000198527617612853646278381f, r, 0.00139304355252534151077271f), r,
                            0.00833336077630519866943359f), r, 0.0416664853692054748535156f), r,
                  0.166666671633720397949219f), r, 0.5f);
}

// 2^24 exp(hi + lo), with hi in [-104.7, 0] and |lo| at most half an ulp of hi (a value held in two parts), for
// sigmoid's exponential and softmax's: the method of host_float::exp (the CPU's exp) without its clamps and NaN
// select, which these uses need not. The factor 2^24 keeps the result a normal float down to exp(-104.3), so that
// the products that scale it back into the subnormals round once; at hi = -104.69 (and below -104.32) 2^k's
// exponent field is 0 and the result is 0.
ACTIVATION_FN float exp_nonpositive_scaled(float hi, float lo) {
  const float rounder = 12583063.0f;  // 1.5 * 2^23 + 127 + 24: the sum's low mantissa bits hold k + 151
  const float shifted = fmaf(hi, 1.44269504088896341f, rounder);
  const float k = shifted - rounder;
  const float r = minus_k_ln2(hi, k) + lo;
  const float two_to_k = float_from_bits(bits_of(shifted) << 23);
  return fmaf(two_to_k, fmaf(r * r, expm1_tail(r), r), two_to_k);
}

// 2^24 exp(-a^2 / 2) for a in [0, 14.47], GELU's exponential: exp_nonpositive_scaled's method, with the reduction
// written for this argument so that a^2 is never rounded (exp would magnify its rounding a^2 / 2, up to 105, times).
// k = round(-a^2 log2(e) / 2) from a plain product (near a half it may round either way), and u = a^2 + 2 k ln2 =
// -2r in [-0.7, 0.7] from the exact a^2 inside one fma, with 2 ln2 in two parts as in minus_k_ln2 (k times the first is
// exact); e^(-u / 2) = 1 + u q(u), q a degree-5 minimax fit with its first coefficient -1/2 exact (relative error
// 2^-27.6 with the coefficients rounded to float). 13 vector instructions and the shift that makes 2^k, where -a^2 / 2
// in two parts and exp_nonpositive_scaled took 16: the float32 GELU forward loop has 31 vector instructions for 16
// elements where it had 34 (33 and 36 issue slots, the division taking 3), and takes a median 0.93x of its time on the
// 2-core Emerald Rapids host (nine rounds in turn, 0.86-0.99x but one; tools/cpu_gelu_loop.cpp); on the H200 its vector
// path is 324 SASS instructions where it was 337, at the same speed within 0.5 %. Within 1.26 ulp over every float a
// where the result is normal (exp_nonpositive_scaled with -a^2 / 2 in two parts: 1.14); GELU's largest errors are where
// they were. From a = 14.44 on the result is 0: at 14.47 k is -151 and 2^k's exponent field, k + 151, is 0.
ACTIVATION_FN float half_square_exp_scaled(float a) {
  const float rounder = 12583063.0f;  // 1.5 * 2^23 + 127 + 24: the sum's low mantissa bits hold k + 151
  const float shifted = fmaf(a * -0.721347520444481703680f, a, rounder);  // -log2(e) / 2
  const float k = shifted - rounder;
  const float u = fmaf(k, -4.24388880e-4f, fmaf(a, a, k * 1.38671875f));  // 2 ln2 = 1.38671875 - 4.24388880e-4
  float q = fmaf(2.158306415e-05f, u, -2.615440753e-04f);
  q = fmaf(q, u, 2.604278503e-03f);
  q = fmaf(q, u, -2.083314396e-02f);
  q = fmaf(q, u, 1.249999851e-01f);
  q = fmaf(q, u, -0.5f);
  const float two_to_k = float_from_bits(bits_of(shifted) << 23);
  return fmaf(two_to_k, u * q, two_to_k);
}

// Phi(-|x|) (the normal distribution's tail) and phi(x) (its density) for the float GELU, in one exponential:
// Phi(-a) = exp(-a^2 / 2) t Q(t) with t = 1 / (1 + 0.34375 a), Q a degree-8 polynomial fitted to
// Phi(-a) exp(a^2 / 2) / t = erfcx(a / sqrt(2)) / (2 t) on a in [0, 14] (relative error 2.4e-8; t maps it into
// [0.17, 1], where Q is smooth), and phi(x) = exp(-a^2 / 2) / sqrt(2 pi) from the same exponential. Q's
// coefficients and 1 / sqrt(2 pi) carry the 2^-24 that undoes half_square_exp_scaled's 2^24 (exact: powers of
// two). a is clamped to 14.47, where the exponential is 0 (from 14 on, Q is used a little past its fit, for results
// below 2^-143: Phi(-14) is 7.8e-45); NaN takes 14.47 too, and x itself carries it into the result.
// Against the form the GPU used before (Numerical Recipes' erfcc: two exponentials and a degree-9 polynomial in
// series) the float32 GELU forward took 0.4x of the time on the 2-core x86-64 machine (one thread: 2.3-2.7 ns an
// element, now 0.95-1.0): the loop was bound by the latency of its longest chain of dependent instructions, which
// this halves. Over every float input (tools/ulp_sweep.py on the GPU, whose bits are the CPU's): forward <= 6.50
// ulp, backward <= 7.43 (the erfcc form: 8.70 and 9.43). Both devices compute it: every step is an explicit fma or a
// single operation (no product that nvcc could contract), and the division is IEEE on both, so a float GELU has the
// same bits on each.
struct NormalTail {
  float tail, pdf;
};
constexpr float kNormalTailScale = 1.0f / 16777216;  // 2^-24
// Q(t) 2^-24 (see above).
ACTIVATION_FN float normal_tail_q(float t) {
  constexpr float kScale = kNormalTailScale;
  float q = fmaf(-2.798232995e-02f * kScale, t, 1.446009874e-01f * kScale);
  q = fmaf(q, t, -2.730886042e-01f * kScale);
  q = fmaf(q, t, 1.922969520e-01f * kScale);
  q = fmaf(q, t, -4.012899101e-02f * kScale);
  q = fmaf(q, t, 1.129568815e-01f * kScale);
  q = fmaf(q, t, 1.166759953e-01f * kScale);
  q = fmaf(q, t, 1.375498027e-01f * kScale);
  return fmaf(q, t, 1.371193081e-01f * kScale);
}
// min(|x|, 14.47), GELU's |x| for its normal tail (at 14.47 the tail's exponential is 0), by an integer minimum of
// the bits (a non-negative float's bits order as its values do): one instruction on the CPU, where a float compare
// and select took two. NaN gives 14.47 too; x itself carries the NaN into the result.
ACTIVATION_FN float tail_magnitude(float x) {
  const uint32_t magnitude = bits_of(x) & 0x7fffffffu, largest = 0x4167851fu;  // 14.47f
  return float_from_bits(magnitude < largest ? magnitude : largest);
}
ACTIVATION_FN NormalTail normal_tail(float x) {
  const float a = tail_magnitude(x);
  const float e = half_square_exp_scaled(a);
  const float t = reciprocal_at_least_one(fmaf(a, 0.34375f, 1.0f));
  return {e * (t * normal_tail_q(t)), e * (0.398942280401432677940f * kNormalTailScale)};
}

}  // namespace float_math

#ifndef __CUDA_ARCH__
// exp in float for the CPU kernels (ELU's backward from the input, sigmoid, SiLU, GELU, softplus, mish). libm's
// expf is a call that g++ cannot vectorize; this is inline and branch-free, so the loops around it vectorize.
// The fused multiply-adds are written out (fmaf), as in expm1_nonpositive, rather than left to the compiler to
// contract a * b + c, which activations.py turns off (-ffp-contract=off) so that the CPU's roundings are the ones
// written here.
namespace host_float {

using activations::bits_of;
using float_math::expm1_tail;

// exp(x) = 2^k (1 + p) for x = k ln2 + r, |r| <= ln2 / 2, with 2^k as the product of two powers of two: each is a
// normal float for every k the clamp allows, so a result in the subnormal range is rounded once, by the second
// product. Every step is arithmetic on all 8 lanes of a vector: the clamps are integer minimums, and one select
// restores NaN. Measured against long double over every 7th float: <= 0.975 ulp, with correctly signed zeros,
// subnormals, +-inf and NaN.
inline float exp(float x) {
  // x clamped to [-104, 89] (e^-104 rounds to 0, e^89 overflows to infinity) by integer minimums of its bits: a
  // positive float's bits order as signed integers do, a negative float's as unsigned integers do, inversely.
  // (Float selects here compiled to masked selects inside a select around exp, as in ELU's backward, and put
  // -104 in the lanes whose exp is not used: a subnormal result costs as much as 3 normal ones.) NaN goes to a
  // finite value here and is restored at the end.
  const int32_t bits = static_cast<int32_t>(bits_of(x));
  const int32_t top = 0x42b20000;  // 89.0f
  const uint32_t below_top = static_cast<uint32_t>(bits < top ? bits : top);
  const uint32_t bottom = 0xc2d00000u;  // -104.0f
  const float clamped = float_from_bits(below_top < bottom ? below_top : bottom);
  // Adding 1.5 * 2^23 + 254 rounds x / ln2 to an integer k and leaves e = k + 254, in [104, 382], in the sum's
  // low mantissa bits: 2^k = 2^(e / 2 - 127) 2^(e - e / 2 - 127), two normal floats whose exponent fields are
  // e / 2 and e - e / 2, made by shifting the sum's bits (the product e << 23 wraps, and its difference with
  // (e / 2) << 23 does not).
  const float rounder = 12583166.0f;
  const float shifted = fmaf(clamped, 1.44269504088896341f, rounder);
  const float k = shifted - rounder;
  const float r = minus_k_ln2(clamped, k);
  const uint32_t a = (bits_of(shifted) >> 1) << 23;
  const float two_to_k_a = float_from_bits(a);
  const float two_to_k_b = float_from_bits((bits_of(shifted) << 23) - a);
  // e^r = 1 + r + r^2 tail(r).
  const float p = fmaf(r * r, expm1_tail(r), r);
  const float result = ((p + 1.0f) * two_to_k_a) * two_to_k_b;
  return x != x ? x : result;
}

// exp for x <= 0, -inf or NaN (softmax's x - max): exp's method without its upper clamp, its NaN select and its
// second power of two (float_math::exp_nonpositive_scaled), x clamped to -104 (e^-104 rounds to 0) by a select
// that keeps NaN (x < -104 is false), which the arithmetic then carries; the 2^24 taken out by one product, which
// rounds a subnormal result once. x > 0 is outside its range. Over every float x <= 0 its results are exp's, bit
// for bit (tools/expm1_exhaustive.cpp), in 16 vector instructions where exp takes 22. One thread, 2^16
// float32 elements in cache, the trees in turn, two rounds, torch/ours (results/cpu-icelake-2026-11-28/
// softmax_exp_nonpositive_ab.log): softmax forward over rows of 1024 1.00-1.02x -> 1.15-1.22x, of 256 0.97-0.99x
// -> 1.11x; log_softmax over rows of 1024 0.96-0.99x -> 1.06-1.16x, of 256 0.81-0.91x -> 0.94-1.03x.
inline float exp_nonpositive(float x) {
  const float clamped = x < -104.0f ? -104.0f : x;
  return float_math::exp_nonpositive_scaled(clamped, -0.0f) * (1.0f / 16777216);  // 2^-24
}

// log1p(u) in float: libm's log1pf is a call (the float32 softplus forward ran at 0.10x of torch's with it). With
// 1 + u = m + c exactly (c: the rounding error of the sum, by Fast2Sum) and m = 2^k f, f in [sqrt(1/2), sqrt(2)),
// log1p(u) = k ln2 + log(1 + r) with r = f - 1 + c 2^-k (f - 1 is exact); log(1 + r) by Cephes' logf
// polynomial, k ln2 in two parts as in minus_k_ln2. log1p takes every u >= -1 (-1 gives -inf, below it NaN), NaN
// and +inf returned as they are, +-0 kept. log1p_arithmetic is its arithmetic without the special cases, for finite
// u > -1 other than -0.0 (NaN passes through): the CPU softplus's log1p(exp(-|z|)) takes it, whose loop the
// selects that tell the special cases apart took from 83 vector instructions for 16 float32 elements to 101.
inline float log1p_arithmetic(float u) {
  const float m = 1.0f + u;
  const float c = one_plus_error(u, m);
  const uint32_t m_bits = bits_of(m);
  const int32_t k = (static_cast<int32_t>(m_bits) - 0x3f3504f3) >> 23;
  const float f = float_from_bits(m_bits - (static_cast<uint32_t>(k) << 23));
  const int32_t k_scale = k < -126 ? -126 : (k > 126 ? 126 : k);  // c 2^-k matters only where 2^-k is normal
  const float r = (f - 1.0f) + c * float_from_bits(static_cast<uint32_t>(127 - k_scale) << 23);
  const float z = r * r;
  float p = 7.0376836292e-2f;
  p = fmaf(p, r, -1.1514610310e-1f);
  p = fmaf(p, r, 1.1676998740e-1f);
  p = fmaf(p, r, -1.2420140846e-1f);
  p = fmaf(p, r, 1.4249322787e-1f);
  p = fmaf(p, r, -1.6668057665e-1f);
  p = fmaf(p, r, 2.0000714765e-1f);
  p = fmaf(p, r, -2.4999993993e-1f);
  p = fmaf(p, r, 3.3333331174e-1f);
  const float kf = static_cast<float>(k);
  float y = fmaf(kf, -2.12194440e-4f, r * z * p);
  y = fmaf(-0.5f, z, y);
  return fmaf(kf, 0.693359375f, r + y);
}
inline float log1p(float u) {
  const float special = u == -1.0f ? -INFINITY : (u < -1.0f ? NAN : u);  // -1, below, NaN, +inf, +-0
  return (u == 0.0f || u == INFINITY || !(u > -1.0f)) ? special : log1p_arithmetic(u);
}

// sigmoid(x) and 1 - sigmoid(x) = sigmoid(-x) in float for the CPU kernels (sigmoid, SiLU, softplus's and Mish's
// backwards, the tanh-form GELU), of a plain x or of a magnitude held in two parts with its sign apart (the
// tanh form's 2u): exp(-(m + m_lo)) = exp(-m - m_lo) by float_math::exp_nonpositive_scaled, which is host_float::exp
// without its clamps, its NaN select and its second power of two; NaN passes through its arithmetic,
// and m is clamped to 104, where e^-m rounds to 0 (m_lo with it: m_lo is up to half an ulp of m, 4 at 1e8). Its
// 2^24 is taken out of the small one of the pair after the product with 1 / (1 + e), so that a subnormal result is
// rounded once. One thread, 2^17 float32 elements in cache, ns an element (torch's beside): SiLU forward 0.261 ->
// 0.230-0.237 (0.233-0.235), backward 0.460 -> 0.408-0.414 (0.398-0.402); sigmoid forward 0.276 -> 0.211-0.223.
struct SigmoidParts {
  float s, one_minus_s;
};
// The pair from scaled = e / unscale, e = exp(-|x|) (unscale a power of two) and whether x < 0: r = 1 / (1 + e)
// and e r, the scale taken out after the product.
inline SigmoidParts sigmoid_parts_from_scaled(bool negative, float scaled, float unscale) {
  const float r = 1.0f / fmaf(scaled, unscale, 1.0f);
  const float small = (scaled * r) * unscale;
  return {negative ? small : r, negative ? r : small};
}
// Of z = -+(magnitude + magnitude_lo), its sign given apart (negative), magnitude >= 0 or NaN. Where magnitude is
// clamped, magnitude_lo is dropped: -0.0 in its place, so that a magnitude_lo of 0 (sigmoid_parts) adds -0.0 in
// both cases, which the compiler drops (r + -0.0 is r), where the select of 0.0 and -0.0 took four instructions.
inline SigmoidParts sigmoid_parts_of_magnitude(bool negative, float magnitude, float magnitude_lo) {
  const bool clamped = magnitude > 104.0f;
  const float a = clamped ? 104.0f : magnitude;  // NaN stays NaN
  const float scaled = float_math::exp_nonpositive_scaled(-a, clamped ? -0.0f : -magnitude_lo);  // 2^24 exp(-|z|)
  return sigmoid_parts_from_scaled(negative, scaled, 1.0f / 16777216);                            // 2^-24
}
// Of x held exactly.
inline SigmoidParts sigmoid_parts(float x) { return sigmoid_parts_of_magnitude(x < 0.0f, fabsf(x), 0.0f); }

// 2^(u v + 100) for u v in [-226, 28], for results rounded to float16 or bfloat16 (relative error 2^-13.7): the
// 16-bit GELU's exponential, whose 2^-100 its other factors carry, as exp_nonpositive_scaled's 2^24, so that a
// subnormal result is rounded once. u v = k + f with k an integer and |f| <= 1/2, the product exact inside the two
// fmas that split it (one rounding fewer, and one multiplication fewer, than forming u v first); 2^f by a degree-3
// polynomial (a Lawson fit, in float coefficients); 2^(k + 100) from exponent bits, a normal float for every k in
// range. One thread in cache, bfloat16 GELU forward: with float_math::exp_nonpositive_scaled, accurate to float,
// in its place 0.345-0.352 ns an element; with a degree-4 polynomial (2^-18.5) and u v rounded first, 0.281-0.289.
inline float exp2_scaled_for_16bit(float u, float v) {
  const float rounder = 12583139.0f;  // 1.5 * 2^23 + 227: the sum's low mantissa bits hold k + 227, in [1, 255]
  const float shifted = fmaf(u, v, rounder);
  const float f = fmaf(u, v, -(shifted - rounder));
  const float p = fmaf(fmaf(fmaf(5.517166493e-02f, f, 2.426111219e-01f), f, 6.932609862e-01f), f, 9.999280736e-01f);
  return p * float_from_bits(bits_of(shifted) << 23);
}

// sigmoid_parts for results rounded to float16 or bfloat16 (SiLU's, softplus's backward): exp(-|x|) by
// exp2_scaled_for_16bit (relative error 2^-13.7, which s and 1 - s keep: under a quarter of a float16 ulp), |x|
// clamped at 150 (e^-150 = 2^-216, 0 in any 16-bit result) by a compare and select that keeps NaN, which then goes
// through the arithmetic into both results. (An integer minimum of the bits, one instruction, took the float16 SiLU
// backward to 0.31 ns an element instead of 0.34, but sent NaN to 150 and s to 1.) test_16bit_every_input checks
// both ops with it on every float16 and bfloat16 input. One thread, 2^17 elements in cache, ns an element, with
// sigmoid_parts -> with this (torch): float16 SiLU forward 0.28 -> 0.18 (0.29), backward 0.44-0.45 -> 0.34-0.35
// (0.42-0.44); bfloat16 SiLU forward 0.27 -> 0.19 (0.34), backward 0.42-0.43 -> 0.34 (0.49-0.51); softplus
// backward float16 0.43-0.44 -> 0.31-0.32 (0.42-0.44), bfloat16 0.45 -> 0.34 (0.50).
inline SigmoidParts sigmoid_parts_for_16bit(float x) {
  const float magnitude = fabsf(x);
  const float a = 150.0f < magnitude ? 150.0f : magnitude;
  const float scaled = exp2_scaled_for_16bit(a, -1.44269504088896341f);  // 2^100 exp(-|x|)
  return sigmoid_parts_from_scaled(x < 0.0f, scaled, 7.88860905221011805e-31f);  // 2^-100
}

}  // namespace host_float

// exp and expm1 in double for the CPU kernels, inline and branch-free for the same reason: libm's are calls, which
// keep the float64 loops scalar. Same method as host_float::exp, with a Taylor series long enough for double (the
// first term left out is below 2^-57 of the result). Against quad precision (tools/float64_ulp.cpp, 8 million
// inputs each): exp <= 1.05 ulp, exp_nonpositive <= 1.01, expm1_nonpositive <= 1.19 (libm: <= 1; with expm1_tail
// in one chain, exp 0.99 and expm1_nonpositive 1.15).
namespace host_double {

inline double from_bits(uint64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}
inline uint64_t bits_of(double d) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  return bits;
}

// x - k ln2, ln2 in two parts (fdlibm's): k * ln2_hi is exact for |k| < 2^20.
inline double minus_k_ln2(double x, double k) {
  return fma(k, -1.90821492927058770002e-10, fma(k, -6.93147180369123816490e-01, x));
}

// (e^r - 1 - r) / r^2 for |r| <= ln2 / 2: the Taylor series to r^13, its even and odd terms as two Horner chains
// in r^2. One chain of 12 fmas made each exponential wait 12 fma latencies, and the float64 loops with an
// exponential ran at the latency rather than at the rate of their instructions (a loop of the float64 sigmoid,
// one thread in cache: 0.64 -> 0.59 ns an element with the two chains).
inline double expm1_tail(double r) {
  const double r2 = r * r;
  double even = fma(1.0 / 479001600, r2, 1.0 / 3628800);  // 1 / 12!, 1 / 10!
  even = fma(even, r2, 1.0 / 40320);
  even = fma(even, r2, 1.0 / 720);
  even = fma(even, r2, 1.0 / 24);
  even = fma(even, r2, 0.5);
  double odd = fma(1.0 / 6227020800, r2, 1.0 / 39916800);  // 1 / 13!, 1 / 11!
  odd = fma(odd, r2, 1.0 / 362880);
  odd = fma(odd, r2, 1.0 / 5040);
  odd = fma(odd, r2, 1.0 / 120);
  odd = fma(odd, r2, 1.0 / 6);
  return fma(odd, r, even);
}

// exp(hi + lo) = (1 + p) 2^k for hi in [-1400, 710] and |lo| at most a few ulps of hi (a value held in two
// parts), with 2^k = two_a two_b, so that a caller can fold 1 + p into a product of its own (one rounding less).
// 1.5 * 2^52 + 2046: the sum's low mantissa bits hold e = k + 2046, in [26, 3070]; 2^k is the product of the
// normal doubles with exponent fields e / 2 and e - e / 2 (below -746, where exp rounds to 0, for callers whose
// product with 1 + p is rounded after, such as normal()'s).
struct ExpParts {
  double p, two_a, two_b;
};
inline ExpParts exp_parts(double hi, double lo) {
  const double rounder = 6755399441057790.0;
  const double shifted = fma(hi, 1.4426950408889634074, rounder);
  const double k = shifted - rounder;
  const double r = minus_k_ln2(hi, k) + lo;
  const uint64_t a = (bits_of(shifted) >> 1) << 52;
  return {fma(r * r, expm1_tail(r), r), from_bits(a), from_bits((bits_of(shifted) << 52) - a)};
}

inline double exp(double x) {
  // x clamped to [-746, 710] (e^-746 rounds to 0, e^710 overflows) by integer minimums of its bits, as in
  // host_float::exp; NaN restored at the end.
  const int64_t bits = static_cast<int64_t>(bits_of(x));
  const int64_t top = 0x4086300000000000;  // 710.0
  const uint64_t below_top = static_cast<uint64_t>(bits < top ? bits : top);
  const uint64_t bottom = 0xc087500000000000u;  // -746.0
  const double clamped = from_bits(below_top < bottom ? below_top : bottom);
  const ExpParts e = exp_parts(clamped, -0.0);  // r + -0.0 is r, and compiles to nothing
  const double result = ((e.p + 1.0) * e.two_a) * e.two_b;
  return x != x ? x : result;
}

// exp for x <= 0 (sigmoid's exp(-|x|)), x clamped at -746. exp's two minimums, one of them signed, took the same
// loop 0.59 -> 0.50 ns an element; with the Taylor tail in two chains the float64 sigmoid forward (one thread, 2^14
// elements) went from 0.76 ns an element to 0.58, torch's 0.59. The clamp takes the form that costs least with the
// loops' instruction set (ACTIVATIONS_CPU_AVX512, activations.py); the results are the same but for a NaN's
// payload. One thread, 2^14 elements in cache, ns an element, one form -> the other (torch):
// - With AVX-512: one unsigned minimum of the bits (vpminuq; a negative double's bits order as its magnitude
//   does), the NaN, whose sign bit -|x| sets, taking -746 and restored at the end. As a max of the doubles
//   (below) the sigmoid forward ran 0.58 -> 0.61-0.63 (0.57-0.59), SiLU 0.61 -> 0.64-0.66 (0.59-0.61).
// - With AVX2, which has no 64-bit minimums (g++ took a bias, a compare and a blend): a max of the doubles,
//   maxpd(-746, x), which a NaN passes, and no NaN select after: sigmoid 1.22-1.27 -> 1.16-1.19 (1.10-1.15), SiLU
//   1.29-1.33 -> 1.24-1.27 (1.14-1.19). test_avx2_build_gives_this_builds_float64_results checks that the two forms
//   agree.
inline double exp_nonpositive(double x) {
#ifdef ACTIVATIONS_CPU_AVX512
  const uint64_t bits = bits_of(x), bottom = 0xc087500000000000u;  // -746.0
  const ExpParts e = exp_parts(from_bits(bits < bottom ? bits : bottom), -0.0);
  const double result = ((e.p + 1.0) * e.two_a) * e.two_b;
  return x != x ? x : result;
#else
  const ExpParts e = exp_parts(x < -746.0 ? -746.0 : x, -0.0);  // a NaN passes, and its result is NaN
  return ((e.p + 1.0) * e.two_a) * e.two_b;
#endif
}

// expm1 for x <= 0 (ELU's negative side); x > 0 and NaN give 0, as the float expm1_nonpositive.
inline double expm1_nonpositive(double x) {
  // Below -40, e^x < 2^-57 and the result rounds to -1.
  const double clamped = x < -40.0 ? -40.0 : (x < 0.0 ? x : 0.0);
  // 1.5 * 2^52 + 1023: the sum's low mantissa bits hold k + 1023, the exponent field of 2^k.
  const double rounder = 6755399441056767.0;
  const double shifted = fma(clamped, 1.4426950408889634074, rounder);
  const double k = shifted - rounder;
  const double r = minus_k_ln2(clamped, k);
  const double p = fma(r * r, expm1_tail(r), r);
  // 2^k (1 + p) - 1 = 2^k p + (2^k - 1), with 2^k - 1 exact for k >= -53 (and rounding to -1 below).
  const double two_to_k = from_bits(bits_of(shifted) << 52);
  const double result = fma(two_to_k, p, two_to_k - 1.0);
  return x == 0.0 ? x : result;  // keeps -0.0
}

// log1p in double (softplus): libm's is a call, which kept the float64 softplus forward scalar (0.31x of torch's).
// fdlibm's log1p, branch-free: 1 + u = m + c exactly (c by Fast2Sum), m = 2^k (1 + f) with 1 + f in
// [sqrt(1/2), sqrt(2)) (f exact; f = u itself where k = 0), and log1p(u) = k ln2 + log(1 + f) + c / m, with
// log(1 + f) = f - (f^2 / 2 - s (f^2 / 2 + R(s^2))), s = f / (2 + f), R fdlibm's degree-7 polynomial. For
// u >= -1 (-1 gives -inf, below it NaN), NaN and +inf returned as they are, +-0 kept; log1p_arithmetic is the
// arithmetic without those cases, as host_float's. Against quad precision on 8 million inputs
// (tools/float64_ulp.cpp): <= 0.80 ulp (libm's: 0.82).
inline double log1p_arithmetic(double u) {
  const double m = 1.0 + u;
  const double c = u > 1.0 ? 1.0 - (m - u) : u - (m - 1.0);
  // k + 1023 from the bits of m / sqrt(1/2) (0x3fe6...: sqrt(1/2)), and k as a double by the exponent-field
  // trick: AVX2 has no vector conversion from 64-bit integers, and one kept this loop scalar.
  const uint64_t m_bits = bits_of(m);
  const uint64_t biased_k = (m_bits - 0x3fe6a09e667f3bcdu + (1023ull << 52)) >> 52;
  const double dk = from_bits(0x4330000000000000u | biased_k) - 4503599627371519.0;  // - (2^52 + 1023)
  const bool k_is_0 = biased_k == 1023;
  const double f = k_is_0 ? u : from_bits(m_bits - ((biased_k << 52) - (1023ull << 52))) - 1.0;
  const double correction = k_is_0 ? 0.0 : c / m;
  const double s = f / (2.0 + f);
  const double z = s * s;
  double r = fma(z, 1.479819860511658591e-01, 1.531383769920937332e-01);
  r = fma(z, r, 1.818357216161805012e-01);
  r = fma(z, r, 2.222219843214978396e-01);
  r = fma(z, r, 2.857142874366239149e-01);
  r = fma(z, r, 3.999999999940941908e-01);
  r = fma(z, r, 6.666666666666735130e-01);
  r *= z;
  const double half_square = 0.5 * f * f;
  return fma(dk, 6.93147180369123816490e-01,
             -((half_square - fma(s, half_square + r, fma(dk, 1.90821492927058770002e-10, correction))) - f));
}
inline double log1p(double u) {
  const double special = u == -1.0 ? -INFINITY : (u < -1.0 ? NAN : u);  // -1, below, NaN, +inf, +-0
  return (u == 0.0 || u == INFINITY || !(u > -1.0)) ? special : log1p_arithmetic(u);
}

// Phi(x) (the normal CDF) and phi(x) (its density) in double for the host GELU: libm's erfc is a call, which
// kept the float64 GELU loops scalar (0.38-0.42x of torch's). For a = |x|: Phi(-a) = E t S(t), with
// E = exp(-a^2 / 2) (a^2 in two parts: the exponential would magnify the rounding of a^2 / 2, up to 749, times),
// t = 1 / (1 + P a), P = 0.2, and S(t) = Phi(-a) / (E t), which falls from 1/2 at a = 0 towards P / sqrt(2 pi) as
// a grows. S is one polynomial of degree 23 in u = t - c, c the middle of t's range, over the whole of a in
// [0, 38.7], within 2^-60.8 of S (tools/normal_tail_fit.py prints the coefficients; with P = 0.25 the same degree
// reaches 2^-57.9, with 0.3 2^-54.6). Then Phi(a) = 1 - Phi(-a) and phi = E / sqrt(2 pi). a is clamped to 38.7,
// past which Phi(-a) rounds to 0; NaN takes 38.7 too, and x carries it into the result.
// Rounding: 1 + P a is held exactly in two parts (P a's own rounding by an fma, the sum's by Fast2Sum), so t's
// own error eps is known (t (1 + eps) = 1 / (1 + P a)); S's last step keeps its two rounding errors (the product's
// by an fma, the sum's by TwoSum: u s1 may outweigh c0), adds c0's second part and what t's error moves S by
// (t eps S'(u)); t S (1 + eps) (1 + p) 2^k is then rounded once.
// Against quad precision (tools/float64_ulp.cpp, 4 million inputs): GELU forward <= 3.00 ulp, backward <= 2.22.
// Speed, one thread, 2^14 inputs in cache, ns an element: Cody's rational approximations (three intervals, each
// computed and one selected, the middle one's degree-8 polynomials compensated in part to reach 3.0 ulp) took
// 3.1 against torch's 1.9 (torch forms 1 + erf, which cancels: its gelu(-8) is 2 % off, gelu(-8.5) is -0).
// With t = 1 / (1 + a / 2): one polynomial of degree 29 over the whole range, 2.9, every fma waiting on the one
// before; in four chains of u^4, 2.0; two pieces of a, [0, 2.75] and beyond, of degree 19, 1.8; the last step
// alone compensated and by Fast2Sum, 1.5 (2.65 ulp forward, 2.22 backward). Each element selected its piece's 20
// coefficients, which AVX2 does by blends (vblendvpd, three micro-ops on Intel's recent cores): the AVX2 loop took
// twice the AVX-512 one's time. This form has no selects. tools/cpu_gelu_float64_loop.cpp (one thread, 4096
// inputs from randn in cache, three rounds in turn), ns an element, two pieces -> this, Emerald Rapids: AVX2
// forward 6.36 -> 4.83, backward 6.66-6.69 -> 5.01; AVX-512 forward 3.18 -> 3.13-3.14, backward 3.29 -> 3.23-3.24.
// With s1 = c1 + u s2 compensated too (2.70 ulp forward over a million inputs, not kept): AVX2 5.27-5.30, AVX-512
// 3.32-3.33 (forwards).
struct NormalCdfPdf {
  double cdf, pdf;
};
constexpr double kNormalScale = 0.2, kNormalCenter = 0.5572082379862701;
constexpr double kNormalConstantLo = 7.581542289324752e-18;
constexpr double kNormal[] = {
    0.1704614374834871,     0.31683546992599076,   0.4935819462530592,    0.6379931058324925,
    0.6681323840994656,     0.5384858826376967,    0.29222189897984846,   0.051165301256773245,
    -0.0706744986886359,    -0.05858299325406241,  0.0031773746846289305, 0.027527509424838614,
    0.006404288560649795,   -0.012483998587658961, -0.005197055356721721, 0.006453103762392737,
    0.0031192655167404854,  -0.003927887510817906, -0.0015894453948199065, 0.002627707170971802,
    0.0006216161019494529,  -0.001627102845594507, -0.0001316251482095345, 0.0006403963590114918};
// sum over j < 5 of kNormal[from + 4 j] v^j.
template <int kFrom>
inline double normal_chain(double v) {
  double s = fma(kNormal[kFrom + 16], v, kNormal[kFrom + 12]);
  s = fma(s, v, kNormal[kFrom + 8]);
  s = fma(s, v, kNormal[kFrom + 4]);
  return fma(s, v, kNormal[kFrom]);
}
inline NormalCdfPdf normal(double x) {
  // a = min(|x|, 38.7) by an integer minimum of the bits (a non-negative double's bits order as its values do).
  const uint64_t magnitude = bits_of(x) & 0x7fffffffffffffffu, largest = 0x4043599999999999u;  // 38.7
  const double a = from_bits(magnitude < largest ? magnitude : largest);
  const double square = a * a;
  const ExpParts e = exp_parts(-0.5 * square, -0.5 * fma(a, a, -square));
  const double scaled = kNormalScale * a;
  const double d = 1.0 + scaled;
  const double d_lo = one_plus_error(scaled, d) + fma(kNormalScale, a, -scaled);  // 1 + P a = d + d_lo
  const double t = 1.0 / d;
  const double eps = fma(-t, d, 1.0) - t * d_lo;
  const double u = t - kNormalCenter, u_lo = t * eps;
  // S = c0 + c1 u + c2 u^2 + c3 u^3 + u^4 (h0 + h1 u + h2 u^2 + h3 u^3), h_i = sum over j of c[4 + i + 4 j] u^(4 j).
  const double u2 = u * u, u4 = u2 * u2;
  const double h01 = fma(normal_chain<5>(u4), u, normal_chain<4>(u4));
  const double h23 = fma(normal_chain<7>(u4), u, normal_chain<6>(u4));
  const double s4 = fma(h23, u2, h01);  // S = c0 + u s1, s_k = c_k + u s_(k+1), from s4 by Horner
  const double s3 = fma(s4, u, kNormal[3]);
  const double s2 = fma(s3, u, kNormal[2]);
  const double s1 = fma(s2, u, kNormal[1]);
  // S'(u) = s1 + u s2 + u^2 s3 + u^3 s4 + ...; the terms left out (u^4 s5 on) are up to 12 % of it, so u_lo S'
  // is off by at most 0.061 eps S.
  const double slope = fma(fma(fma(s4, u, s3), u, s2), u, s1);
  // S = s + s_lo: c0 + u s1 with the product's and the sum's rounding errors, c0's second part and u_lo S'.
  const double product = s1 * u;
  const double s = kNormal[0] + product;
  const double product_part = s - kNormal[0];
  const double sum_lo = (kNormal[0] - (s - product_part)) + (product - product_part);
  const double s_lo = fma(slope, u_lo, (fma(s1, u, -product) + sum_lo) + kNormalConstantLo);
  // R = t (1 + eps) S = r + r_lo, then Phi(-a) = (1 + p) R 2^k rounded once.
  const double r = t * s;
  const double r_lo = fma(t, s, -r) + fma(t, s_lo, r * eps);
  const double tail = ((r + fma(e.p, r, r_lo)) * e.two_a) * e.two_b;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  return {x < 0.0 ? tail : 1.0 - tail, (fma(e.p, kInvSqrt2Pi, kInvSqrt2Pi) * e.two_a) * e.two_b};
}

}  // namespace host_double
#endif

// expm1 for x <= 0 and exp in the compute type: CUDA's on the GPU; on the CPU the vectorizable ones above.
#ifdef __CUDA_ARCH__
ACTIVATION_FN double expm1_nonpositive(double x) { return expm1(x); }
ACTIVATION_FN float exp_of(float x) { return expf(x); }
ACTIVATION_FN double exp_of(double x) { return exp(x); }
ACTIVATION_FN double exp_nonpositive_of(double x) { return exp(x); }  // exp for x <= 0 (or NaN)
ACTIVATION_FN float exp_nonpositive_of(float x) { return expf(x); }
#else
ACTIVATION_FN double expm1_nonpositive(double x) { return host_double::expm1_nonpositive(x); }
ACTIVATION_FN float exp_of(float x) { return host_float::exp(x); }
ACTIVATION_FN double exp_of(double x) { return host_double::exp(x); }
ACTIVATION_FN double exp_nonpositive_of(double x) { return host_double::exp_nonpositive(x); }
ACTIVATION_FN float exp_nonpositive_of(float x) { return host_float::exp_nonpositive(x); }
#endif
ACTIVATION_FN float fma_of(float a, float b, float c) { return fmaf(a, b, c); }

// Whether the 16-bit formulas that lean on the GPU's approximate intrinsics (__expf, __fdividef, __logf) are taken:
// on the CPU those are the accurate functions, and the formulas cost more than the float ones there (tanh, GELU,
// softplus; GELU's, with two exponentials where the float form has one, took the bfloat16 forward from 1.41x to
// 0.95x torch's; tried again with an inline, vectorized exp2, whose unused second call g++ then drops, it took 0.59
// ms per 2^20 elements on one thread against the float form's 0.42: its exponential waits on the division and a
// polynomial, where the float form's runs beside the division; the CPU's 16-bit GELU has a formula of its own,
// Gelu::normal_16bit_on_cpu). LeakyReLU's, ELU's and Mish's 16-bit formulas pay on both.
#ifdef __CUDA_ARCH__
constexpr bool kCheap16BitMath = true;
#else
constexpr bool kCheap16BitMath = false;
#endif

// log for results rounded to float16 or bfloat16: __logf (absolute error about 2^-21) on the GPU.
#ifdef __CUDA_ARCH__
ACTIVATION_FN float log_for_16bit(float x) { return __logf(x); }
#else
ACTIVATION_FN float log_for_16bit(float x) { return logf(x); }
#endif

// exp for results rounded to float16 or bfloat16: CUDA's __expf (one ex2.approx, relative error about 2^-21 where
// the result is normal) on the GPU, where the accurate expf makes the 16-bit kernels, with 8 elements a thread,
// compute-bound; the float one on the CPU.
#ifdef __CUDA_ARCH__
ACTIVATION_FN float exp_for_16bit(float x) { return __expf(x); }
#else
ACTIVATION_FN float exp_for_16bit(float x) { return exp_of(x); }
#endif
ACTIVATION_FN double exp_for_16bit(double x) { return exp_of(x); }  // not used: a double result is not 16-bit
// exp(x) for x <= 0, for results rounded to float16 or bfloat16 (a larger x gives exp(x) up to x = 72 and inf past
// it; the callers select such values away): on the GPU one ex2.approx.ftz of x log2(e) + 24 and an exact product by
// 2^-24, which keeps the results that are subnormal floats (bfloat16 has them too) without __expf's compare and two
// predicated products around its ex2. The rounding of x log2(e) + 24 adds at most 2^-20.5 relative error.
#ifdef __CUDA_ARCH__
ACTIVATION_FN float exp_nonpositive_for_16bit(float x) {
  float scaled;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(scaled) : "f"(fmaf(x, 1.44269504088896341f, 24.0f)));
  return scaled * 5.9604644775390625e-8f;  // 2^-24
}
#else
ACTIVATION_FN float exp_nonpositive_for_16bit(float x) { return exp_for_16bit(x); }
#endif
ACTIVATION_FN double exp_nonpositive_for_16bit(double x) { return exp_of(x); }  // not used, as above
// 2^x for results rounded to float16 or bfloat16: on the GPU exp2f is one ex2.approx.f32 (relative error 2^-22,
// subnormal results kept), the instruction __expf takes after its multiplication by log2(e).
ACTIVATION_FN float exp2_for_16bit(float x) { return exp2f(x); }

// 1 / x for results rounded to float16 or bfloat16, for x >= 1 (every use: 1 + e, 1 + c |x|, n + 2, e + 1) or NaN:
// on the GPU one MUFU.RCP (rcp.approx, within 1 ulp of float), without a division's Newton steps and slow path;
// 0 for x > 2^126, where every use here wants ~0 anyway. __fdividef(1.0f, x) gave the same bits for every such x
// (tools/reciprocal_exhaustive.cu) but guarded x below 2^-126, which no use passes, with 4 more instructions.
#ifdef __CUDA_ARCH__
ACTIVATION_FN float reciprocal_for_16bit(float x) { return approximate_reciprocal(x); }
#else
ACTIVATION_FN float reciprocal_for_16bit(float x) { return 1.0f / x; }
#endif
ACTIVATION_FN double reciprocal_for_16bit(double x) { return 1.0 / x; }  // not used: a double result is not 16-bit
ACTIVATION_FN double fma_of(double a, double b, double c) { return fma(a, b, c); }
// The larger and the smaller of a and b, one instruction each on both devices: FMNMX on the GPU, and on the CPU
// the select, which g++ compiles to maxps / minps. They differ only where an operand is NaN (the GPU returns the
// other operand, the CPU b): callers pass no NaN or let another operand carry it.
template <class T>
ACTIVATION_FN T larger_of(T a, T b) {
#ifdef __CUDA_ARCH__
  return fmax(a, b);
#else
  return a > b ? a : b;
#endif
}
template <class T>
ACTIVATION_FN T smaller_of(T a, T b) {
#ifdef __CUDA_ARCH__
  return fmin(a, b);
#else
  return a < b ? a : b;
#endif
}

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
  return expm1_nonpositive(x);  // ELU's 16-bit forward takes it for x <= 0 only
#endif
}

// More elementary functions in the compute type, each accurate to a few ulp on both devices.
// log1p_arithmetic_of: log1p for finite x > -1 other than -0.0, or NaN (the CPU's softplus).
#ifdef __CUDA_ARCH__
ACTIVATION_FN float log1p_of(float x) { return log1pf(x); }
ACTIVATION_FN float erfc_of(float x) { return erfcf(x); }
#else
ACTIVATION_FN float log1p_of(float x) { return host_float::log1p(x); }
ACTIVATION_FN float log1p_arithmetic_of(float x) { return host_float::log1p_arithmetic(x); }
ACTIVATION_FN float erfc_of(float x) { return erfcf(x); }
#endif
#ifdef __CUDA_ARCH__
ACTIVATION_FN double log1p_of(double x) { return log1p(x); }
#else
ACTIVATION_FN double log1p_of(double x) { return host_double::log1p(x); }
ACTIVATION_FN double log1p_arithmetic_of(double x) { return host_double::log1p_arithmetic(x); }
#endif
ACTIVATION_FN double erfc_of(double x) { return erfc(x); }

// tanh from expm1 (the float one of our own, so that both devices give the same bits and the CPU loops
// vectorize): tanh|x| = -m / (2 + m) with m = expm1(-2|x|), which keeps full relative accuracy near zero. In
// double on the CPU too: libm's tanh is a call that kept the float64 loop scalar (0.61x of torch's forward).
template <class T>
ACTIVATION_FN T tanh_from_expm1(T x) {
  const T m = expm1_nonpositive(T(-2) * fabs(x));
  const T magnitude = -m / (T(2) + m);
  return x != x ? x : copysign(magnitude, x);
}
// In float, |x| needs only a clamp at 8.75 (where m rounds to -1; +inf lands there too), which keeps NaN, so that
// NaN goes through the arithmetic to the result (copysign keeps it NaN); -0.0 needs no select either: copysign
// restores it. With expm1_in_range's shifted 2^k, the CPU's 512-bit loop took 24 vector instructions and a
// division where it took 38 and a division, and the float32 forward (2-core Ice Lake Xeon, one thread, 2^18
// elements in cache, torch/ours) went from 0.62-0.67x torch's Sleef tanh to 0.86-0.98x; bfloat16 from 2.7-3.0x to
// 3.9-4.0x. Over every float against double (as tools/expm1_exhaustive.cpp): <= 2.50 ulp, as before.
ACTIVATION_FN float tanh_of(float x) {
  const float a = fabsf(x);
  const float m = expm1_in_range(-2.0f * (8.75f < a ? 8.75f : a));
  return copysignf(-m / (2.0f + m), x);
}
#ifdef __CUDA_ARCH__
ACTIVATION_FN double tanh_of(double x) { return tanh(x); }
#else
ACTIVATION_FN double tanh_of(double x) { return tanh_from_expm1(x); }
#endif

// sigmoid(x) and 1 - sigmoid(x) = sigmoid(-x), both to full relative accuracy (1 - s computed from a rounded s
// would lose the bits that matter where s is near 1).
// Of z = -+(magnitude + magnitude_lo) for a value held in two parts (|magnitude_lo| << magnitude), its sign given
// apart (negative), the rounding error magnitude_lo is applied to the exponential, which would magnify it
// `magnitude` times: exp(-|z|) = exp(-magnitude) (1 - magnitude_lo). `fast`: the cheap exponential, for 16-bit
// results.
template <class T>
struct SigmoidPair {
  T s, one_minus_s;
  // Of x held exactly: no correction to apply, and none of the fma and select that apply a zero one.
  ACTIVATION_FN explicit SigmoidPair(T x) {
#ifndef __CUDA_ARCH__
    if constexpr (sizeof(T) == 4) {
      *this = SigmoidPair(host_float::sigmoid_parts(x));
      return;
    }
#endif
    from_exp(x < T(0), exp_nonpositive_of(-fabs(x)), false);
  }
  ACTIVATION_FN SigmoidPair(bool negative, T magnitude, T magnitude_lo, bool fast = false) {
#ifndef __CUDA_ARCH__
    if constexpr (sizeof(T) == 4) {  // the CPU's float sigmoid (its exp_for_16bit is the accurate exp)
      *this = SigmoidPair(host_float::sigmoid_parts_of_magnitude(negative, magnitude, magnitude_lo));
      return;
    }
#endif
    const T e = fast ? exp_nonpositive_for_16bit(-magnitude) : exp_nonpositive_of(-magnitude);
    from_exp(negative, fma_of(e, -magnitude_lo, e), fast);
  }
#ifndef __CUDA_ARCH__
  // From parts that a CPU formula computed (host_float's).
  explicit SigmoidPair(const host_float::SigmoidParts& parts) : s(parts.s), one_minus_s(parts.one_minus_s) {}
#endif

 private:
  // From e = exp(-|x|) and whether x < 0.
  ACTIVATION_FN void from_exp(bool negative, T e, bool fast) {
    const T r = fast ? reciprocal_for_16bit(T(1) + e) : reciprocal_at_least_one(T(1) + e);  // e <= 1
    s = negative ? e * r : r;
    one_minus_s = negative ? r : e * r;
  }
};

// SigmoidPair of x; where the result is rounded to float16 or bfloat16, on the CPU, from the cheaper
// host_float::sigmoid_parts_for_16bit.
template <bool k16BitResult, class T>
ACTIVATION_FN SigmoidPair<T> sigmoid_pair(T x) {
#ifndef __CUDA_ARCH__
  if constexpr (k16BitResult) return SigmoidPair<T>(host_float::sigmoid_parts_for_16bit(x));
#endif
  return SigmoidPair<T>(x);
}

// 1 / (1 + exp(-x)) without overflow and with full relative accuracy on both sides: SigmoidPair's s, e / (1 + e)
// with e = exp(x) for x < 0, which stays accurate where the result is tiny (1 / (1 + exp(-x)) overflows to 0).
template <class T>
ACTIVATION_FN T sigmoid_of(T x) {
  return SigmoidPair<T>(x).s;
}

// torch.selu's constants (aten/src/ATen/native/Activation.cpp).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

// A real coefficient c (alpha * scale, or scale) held as hi + lo in T, so that c * v is rounded once, as if c
// were exact: rounding alpha = 0.3 to float alone costs up to half an ulp in every result. hi is c rounded to T
// (what a plain product takes), lo the rest.
// times() splits c otherwise: times_hi is c rounded toward zero, one ulp further where that is c itself, so that
// times_lo is never zero and has c's sign (c = 0: both 0). v times_hi and v times_lo then have one sign, and
// fma(v, times_hi, v times_lo) is right for every v: +-0 keeps its sign (a sum of zeros of one sign), +-inf gives
// +-inf (not inf - inf), NaN gives NaN. (With hi and lo, lo can have the other sign: the product needed two
// compares and a select for zeros and infinities, and the float32 LeakyReLU forward on the CPU took 15 vector
// instructions for 16 elements, 0.158 ns an element against torch's 0.108 in cache; now 5, 0.078.) Infinite or
// NaN c: times_hi and times_lo are both c, and fma(v, c, v c) is v c.
template <class T>
struct Coefficient {
  T hi, lo, times_hi, times_lo;
  // c + c_lo: c_lo carries what a double cannot hold of a constant (for a float64 compute type).
  ACTIVATION_FN explicit Coefficient(double c, double c_lo = 0.0)
      : hi(T(c)), lo(T((c - double(T(c))) + c_lo)), times_hi(toward_zero_part(c, c_lo)), times_lo(T(c)) {
    if (c - c == 0.0) times_lo = T((c - double(times_hi)) + c_lo);
  }
  ACTIVATION_FN T times(T v) const { return times(v, times_hi, times_lo); }
  // v c for the parts (times_hi, times_lo) of a coefficient selected per element: one product for either side of
  // a select.
  static ACTIVATION_FN T times(T v, T part_hi, T part_lo) { return fma_of(v, part_hi, v * part_lo); }

 private:
  static ACTIVATION_FN T toward_zero_part(double c, double c_lo) {
    const T nearest = T(c);
    if (!(c - c == 0.0) || c == 0.0) return nearest;  // inf, NaN, 0
    const double rest = (c - double(nearest)) + c_lo;  // what nearest leaves of c + c_lo
    const bool rest_has_c_sign = c > 0.0 ? rest > 0.0 : rest < 0.0;
    return rest_has_c_sign ? nearest : next_toward_zero(nearest);
  }
  static ACTIVATION_FN float next_toward_zero(float x) { return nextafterf(x, 0.0f); }
  static ACTIVATION_FN double next_toward_zero(double x) { return nextafter(x, 0.0); }
};

// ---------------------------------------------------------------------------------------------------------------
// The activations. Each is a functor template F<T, k16BitResult>: T is the compute type, k16BitResult says the
// result is rounded to float16 or bfloat16 (a cheaper formula may then do). It is built from the op's arguments
// as doubles (`args`, laid out by the op table in activations.py: the user's parameters, then the row's
// constants) and says by three flags what its backward can work from:
//   kMask:       piecewise linear; the backward needs one bit per element. bool passes(T x) is that bit;
//                the gradient is multiplied by `passing` where it is set and by `blocked` where not.
//   kFromInput:  T backward(T grad, T x) = grad * f'(x), and T second_derivative(T x) = f''(x).
//   kFromOutput: T backward_from_output(T grad, T y) = grad * f'(x) written with y = f(x), and
//                T second_derivative_from_output(T y), the derivative of that f' with respect to y;
//                output_determines_input_side(args) says whether y determines f'(x) for these arguments.
// The double backward is grad_grad * grad * (the second derivative); see Backward and DoubleBackward below.
// A piecewise-linear functor whose forward returns x itself or one of its constants (ReLU, hardtanh) says so by
// `bool constants_are(Holds holds)`: whether holds(c) for each of those constants. Where the storage type holds
// them, its results are values of the storage type already, stored without rounding (the CPU's bfloat16 loops).

template <class T, bool = false>
struct Relu {
  static constexpr bool kMask = true, kFromInput = false, kFromOutput = false;
  double passing = 1.0, blocked = 0.0;
  ACTIVATION_FN explicit Relu(const double*) {}
  // NaN propagates. -0.0 gives +0.0, as torch.relu does on CUDA (torch's CPU kernel returns -0.0 there; the two
  // differ only in the sign of that zero). x where the gradient passes: one compare, where (x > 0 || x != x) took
  // two and an or of their masks in the CPU loop.
  ACTIVATION_FN T forward(T x) const { return passes(x) ? x : T(0); }
  // torch's threshold_backward passes the gradient where !(x <= 0): NaN inputs pass it, +-0.0 block it.
  ACTIVATION_FN bool passes(T x) const { return !(x <= T(0)); }
  template <class Holds>
  bool constants_are(Holds) const {
    return true;  // +0.0, which every storage type holds
  }
};

// x for x > 0, negative_slope * x otherwise (NaN: slope * NaN = NaN, and its gradient is slope * grad, as torch's).
// A 16-bit result takes the plain product with the slope rounded to float: within 2^-23 of the exact product, so
// the result is correctly rounded or one ulp off. (The exact product, a multiply, an fma, two compares and three
// blends, held the CPU's bfloat16 forward to 0.64x torch's; with the plain product, 0.98x, one thread.)
template <class T, bool k16BitResult = false>
struct LeakyRelu {
  static constexpr bool kMask = true, kFromInput = false, kFromOutput = false;
  Coefficient<T> slope;
  double passing = 1.0, blocked;
  ACTIVATION_FN explicit LeakyRelu(const double* args) : slope(args[0]), blocked(args[0]) {}
  ACTIVATION_FN T forward(T x) const { return x > T(0) ? x : (k16BitResult ? x * slope.hi : slope.times(x)); }
  ACTIVATION_FN bool passes(T x) const { return x > T(0); }
};

// min(max(x, min_val), max_val), NaN propagating, and min_val itself for x = -0.0 <= min_val = 0 (ReLU6 gives
// +0.0 there, as torch's CUDA kernel). The gradient passes strictly inside the interval and where x is NaN, as
// torch's hardtanh_backward: !(x <= min_val || x >= max_val). ReLU6 is (0, 6). min_val <= max_val (functor_args
// checks, as torch); where they are equal, the result is max_val. The forward is a max, a min and a NaN select:
// on the CPU one instruction each (x <= min_val ? min_val : (x >= max_val ? max_val : x) took 4 compares and 3
// blends). 2 threads, 2^22 elements, torch/ours, three runs: float32 hardtanh_ (in place, in cache) 0.86-1.01x ->
// 0.98-1.05x, relu6_ 0.85-0.94x -> 0.98-1.01x, hardtanh 0.95-0.99x -> 1.00-1.02x; bfloat16 hardtanh 1.92-2.15x ->
// 1.95-2.43x.
template <class T, bool = false>
struct Hardtanh {
  static constexpr bool kMask = true, kFromInput = false, kFromOutput = false;
  T low, high;
  double passing = 1.0, blocked = 0.0;
  ACTIVATION_FN explicit Hardtanh(const double* args) : low(T(args[0])), high(T(args[1])) {}
  ACTIVATION_FN T forward(T x) const {
    const T above_low = x > low ? x : low;  // NaN gives low here, and x below
    const T clamped = above_low < high ? above_low : high;
    return x != x ? x : clamped;
  }
  ACTIVATION_FN bool passes(T x) const { return !(x <= low || x >= high); }
  template <class Holds>
  bool constants_are(Holds holds) const {
    return holds(low) && holds(high);
  }
};

// min(max(x + 3, 0), 6) / 6, NaN propagating; the gradient is grad / 6 strictly inside (-3, 3), else 0 (NaN
// included), as torch's hardsigmoid_backward. The clamp is two selects in turn whose operand order is that of
// maxps and minps (a NaN passes); g++ 12 makes each a compare and a blend (an and, or a masked move, for the zero:
// not maxps and minps themselves); written nested it took 5 compares, 3 ands and 2 blends, and the division went
// into both sides of a select. One thread, 2^15 elements in cache, torch/ours, the
// same results: float32 0.94x -> 1.33x, bfloat16 1.48x -> 2.00x, float16 1.28x -> 1.72x; with AVX2 kernels on both
// sides float32 0.71x -> 0.99x, bfloat16 0.87x -> 0.98x, float16 1.02x -> 1.35x.
// A 16-bit result takes the product by 1/6 (in float) for the division: the float results differ (2282 of the 65536
// bfloat16 inputs, 13314 of the float16 ones), but rounded to the input's 16-bit type every one is torch's
// (test_16bit_hardsigmoid_product_is_the_division checks all of them). The division was two vdivps per 16
// elements of the AVX2 loop. 2 threads, 2^22 elements, torch/ours, three rounds in turn: AVX2 kernels on both
// sides, bfloat16 forward 0.91-0.94x -> 0.97-0.99x, float16 1.07-1.16x -> 1.23-1.36x; AVX-512, bfloat16
// 1.48-1.51x -> 1.71-1.88x, float16 1.14-1.17x -> 1.53-1.79x.
// The CPU's float32 and float64 results take the product by 1/6 and one fma's correction (e = clamped - 6q
// exactly, then q + e/6: the last step of Markstein's division), the division's bits for every clamped value, 0
// or at least 2^-22 (2^-51 in float64), far above the underflow where the correction can err: every float32 input
// gives torch's bits, and 2^30 random float64 clamp values did (results/cpu-epyc-2026-12-07/
// hardsigmoid_float{32,64}_division.log). Zen 4, one thread, 2^18 elements in cache, ns an element: float32
// 0.133-0.161 -> 0.117-0.119 (torch 0.14), float64 0.339-0.345 -> 0.209-0.210 (torch 0.34-0.36). The GPU keeps
// its division: not measured there.
template <class T, bool k16BitResult = false>
struct Hardsigmoid {
  static constexpr bool kMask = true, kFromInput = false, kFromOutput = false;
  double passing = 1.0 / 6.0, blocked = 0.0;
  ACTIVATION_FN explicit Hardsigmoid(const double*) {}
  ACTIVATION_FN T forward(T x) const {
    const T shifted = x + T(3);
    const T above_zero = shifted < T(0) ? T(0) : shifted;  // NaN passes, as through maxps(0, shifted)
    const T clamped = above_zero > T(6) ? T(6) : above_zero;
    if constexpr (k16BitResult) return clamped * T(1.0 / 6.0);
#ifdef __CUDA_ARCH__
    return clamped / T(6);
#else
    const T quotient = clamped * T(1.0 / 6.0);  // clamped / 6, the same bits (see above)
    return std::fma(std::fma(-quotient, T(6), clamped), T(1.0 / 6.0), quotient);
#endif
  }
  ACTIVATION_FN bool passes(T x) const { return x > T(-3) && x < T(3); }
};

// elu(x) = scale * x for x > 0, scale * alpha * expm1(x) for x <= 0 (expm1 keeps accuracy near zero).
// SELU is ELU with torch's fixed alpha and scale. NaN takes the x > 0 branch, as in torch's kernels.
// args: alpha, scale.
template <class T, bool k16BitResult = false>
struct Elu {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = true;
  Coefficient<T> negative;  // alpha * scale
  Coefficient<T> positive;  // scale

  ACTIVATION_FN explicit Elu(const double* args) : negative(args[0] * args[1]), positive(args[1]) {}
  // The output tells which side x was on only for alpha >= 0 (see backward_from_output).
  static ACTIVATION_FN bool output_determines_input_side(const double* args) { return args[0] >= 0.0; }

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
  ACTIVATION_FN T backward(T grad, T x) const {
    const bool negative_side = x <= T(0);
    if constexpr (k16BitResult) {
      return negative_side ? grad * (negative.hi * exp_nonpositive_for_16bit(x)) : grad * positive.hi;
    }
    const T part_hi = negative_side ? negative.times_hi : positive.times_hi;
    const T part_lo = negative_side ? negative.times_lo : positive.times_lo;
    return Coefficient<T>::times(negative_side ? grad * exp_of(x) : grad, part_hi, part_lo);
  }
  // torch's elu_double_backward: scale * alpha * exp(x) for x < 0, 0 otherwise.
  ACTIVATION_FN T second_derivative(T x) const { return x < T(0) ? negative.times(exp_of(x)) : T(0); }

  // The same derivative from the output y, for the in-place variants whose input is gone: for x <= 0,
  // scale * alpha * exp(x) = y + scale * alpha. Valid for alpha >= 0, where y <= 0 exactly when x <= 0 (the
  // operators refuse alpha < 0 there). It cancels where elu flattens out, as torch's elu_ backward does.
  ACTIVATION_FN T backward_from_output(T grad, T y) const {
    return y <= T(0) ? grad * ((y + negative.hi) + negative.lo) : positive.times(grad);
  }
  // d/dy (y + scale * alpha) = 1 for y < 0, 0 otherwise (torch's elu_double_backward with is_result).
  ACTIVATION_FN T second_derivative_from_output(T y) const { return y < T(0) ? T(1) : T(0); }
};

// sigmoid(x); the backward works from the output, as torch's: y (1 - y), whose derivative in y is 1 - 2 y.
template <class T, bool = false>
struct Sigmoid {
  static constexpr bool kMask = false, kFromInput = false, kFromOutput = true;
  ACTIVATION_FN explicit Sigmoid(const double*) {}
  static ACTIVATION_FN bool output_determines_input_side(const double*) { return true; }
  ACTIVATION_FN T forward(T x) const { return sigmoid_of(x); }
  ACTIVATION_FN T backward_from_output(T grad, T y) const { return grad * (y * (T(1) - y)); }
  ACTIVATION_FN T second_derivative_from_output(T y) const { return T(1) - T(2) * y; }
};

// tanh(x); the backward from the output, as torch's: 1 - y^2, as one fused multiply-add, rounded once (it was
// (1 - y)(1 + y), exact in its first factor near |y| = 1 and rounded twice; with the fma the CPU's bfloat16
// backward went from 0.91x torch's to 0.97-1.00x, one thread in cache); its derivative in y is -2 y.
template <class T, bool k16BitResult = false>
struct Tanh {
  static constexpr bool kMask = false, kFromInput = false, kFromOutput = true;
  ACTIVATION_FN explicit Tanh(const double*) {}
  static ACTIVATION_FN bool output_determines_input_side(const double*) { return true; }
  ACTIVATION_FN T forward(T x) const {
    if constexpr (k16BitResult && kCheap16BitMath) {
      // 1 - 2 / (exp(2|x|) + 1) with the cheap exponential; near zero, where it cancels, the series to x^5
      // (relative error below x^6 / 18 < 2^-28).
      const T a = fabs(x);
      const T via_exp = T(1) - T(2) * reciprocal_for_16bit(exp_for_16bit(T(2) * a) + T(1));
      const T square = x * x;
      const T series = x * fma_of(square, fma_of(square, T(2.0 / 15), T(-1.0 / 3)), T(1));
      return a < T(0.0625) ? series : copysign(via_exp, x);
    }
    return tanh_of(x);
  }
  ACTIVATION_FN T backward_from_output(T grad, T y) const { return grad * fma_of(-y, y, T(1)); }
  ACTIVATION_FN T second_derivative_from_output(T y) const { return T(-2) * y; }
};

// silu(x) = x sigmoid(x); f' = s (1 + x (1 - s)), f'' = s (1 - s) (2 + x (1 - 2 s)) with s = sigmoid(x).
template <class T, bool k16BitResult = false>
struct Silu {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = false;
  ACTIVATION_FN explicit Silu(const double*) {}
  ACTIVATION_FN T forward(T x) const { return x * sigmoid_pair<k16BitResult>(x).s; }
  ACTIVATION_FN T backward(T grad, T x) const {
    const SigmoidPair<T> p = sigmoid_pair<k16BitResult>(x);
    return grad * (p.s * fma_of(x, p.one_minus_s, T(1)));
  }
  ACTIVATION_FN T second_derivative(T x) const {
    const SigmoidPair<T> p(x);
    return p.s * p.one_minus_s * fma_of(x, p.one_minus_s - p.s, T(2));
  }
};

// a * b as hi + lo: hi the rounded product, lo what its rounding lost (exact, by an fma), for finite products.
template <class T>
struct Product {
  T hi, lo;
  ACTIVATION_FN Product(T a, T b) : hi(a * b), lo(fma_of(a, b, -a * b)) {}
};

// gelu(x) = x Phi(x), Phi the standard normal CDF (args[0] = 0), or torch's tanh approximation
// 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3) (args[0] = 1).
// Phi(x) = erfc(-x / sqrt(2)) / 2, not (1 + erf(x / sqrt(2))) / 2 as torch writes it, which cancels for x < 0
// (torch's float32 gelu(-5) is 10 % off). On the far negative side erfc(z) falls like exp(-z^2): the rounding
// of z = -x / sqrt(2) would cost 2 z^2 ulp, so z is held in two parts and erfc corrected to first order
// (erfc(z + d) = erfc(z) - d 2/sqrt(pi) exp(-z^2)). The tanh form is x sigmoid(2u), with 2u likewise in two parts
// (the exponential in sigmoid magnifies its rounding |2u| times). A 16-bit result needs neither correction.
template <class T, bool k16BitResult = false>
struct Gelu {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = false;
  static constexpr double kCubic = 0.044715;
  static constexpr double kSqrt2OverPi = 0.7978845608028654;
  static constexpr double kInvSqrt2 = 0.7071067811865476, kInvSqrt2Lo = -4.833646656726457e-17;  // 1 / sqrt(2)
  static constexpr double kInvSqrt2Pi = 0.3989422804014327;
  static constexpr double kTwoOverSqrtPi = 1.1283791670955126;
  static constexpr double kLog2e = 1.4426950408889634;
  bool tanh_form;
  // 0.044715 times 2 sqrt(2 / pi), torch's double constants, exactly: the double product and its rounding error
  // (Python: float(Fraction(2 * 0.7978845608028654) * Fraction(0.044715) - Fraction(product))).
  static constexpr double kCubicTimesLinear = 2 * kSqrt2OverPi * kCubic, kCubicTimesLinearLo = 3.3591871225076503e-19;
  // -1 / sqrt(2) as exactly as the compute type can use it; the tanh form's 2u = x (c1 + c3 x^2) with c1 =
  // 2 sqrt(2 / pi) and c3 = 0.044715 c1 (torch's constants, 2 sqrt(2 / pi) (x + 0.044715 x^3) as torch writes it).
  Coefficient<T> minus_inv_sqrt2{-kInvSqrt2, -kInvSqrt2Lo}, linear{2 * kSqrt2OverPi},
      cubic{kCubicTimesLinear, kCubicTimesLinearLo};
  ACTIVATION_FN explicit Gelu(const double* args) : tanh_form(args[0] != 0.0) {}

  // Phi(x) and phi(x), both from E = exp(-x^2 / 2), with x^2 in two parts (the exponential would magnify the
  // rounding of x^2 / 2, 60 at x = -11, times over), and Phi(|x|) = 1 - Phi(-|x|). In float on both devices:
  // float_math::normal_tail, one exponential, one division, no cancellation (see there). In double: on the CPU
  // host_double::normal (see there); on the GPU the C library's erfc, with -x / sqrt(2) in two parts and its
  // rounding corrected to first order.
  struct Normal {
    T cdf, pdf;
  };
  ACTIVATION_FN Normal normal(T x) const {
#ifndef __CUDA_ARCH__
    if constexpr (k16BitResult) return normal_16bit_on_cpu(x);
#endif
    if constexpr (k16BitResult && kCheap16BitMath) {
      // For a 16-bit result: Phi(-|x|) = t 2^(Q(t) - x^2 log2(e) / 2), erfcc's form with the 1/2 and log2(e)
      // folded into a shorter polynomial (tail_exponent_16bit), a cheap reciprocal and one ex2. The rounding of
      // the exponent (2^-24 of at most 133 where the result is not 0) adds less than 2^-17 relative.
      const T t = reciprocal_for_16bit(fma_of(fabs(x), T(0.5 * kInvSqrt2), T(1)));
      const T minus_half_square_log2 = x * T(-0.5 * kLog2e);  // times x: -x^2 log2(e) / 2
      const T tail = t * exp2_for_16bit(fma_of(x, minus_half_square_log2, tail_exponent_16bit(t)));  // Phi(-|x|)
      return {x < T(0) ? tail : T(1) - tail, T(kInvSqrt2Pi) * exp2_for_16bit(x * minus_half_square_log2)};
    }
    if constexpr (sizeof(T) == 4) {
      const float_math::NormalTail n = float_math::normal_tail(x);
      return {x < T(0) ? n.tail : T(1) - n.tail, n.pdf};
    } else {
#ifndef __CUDA_ARCH__
      const host_double::NormalCdfPdf n = host_double::normal(x);
      return {n.cdf, n.pdf};
#else
      const Product<T> square(x, x);
      const T e = exp_of(T(-0.5) * square.hi);
      const T pdf = T(kInvSqrt2Pi) * (square.lo - square.lo == T(0) ? fma_of(e, T(-0.5) * square.lo, e) : e);
      const T z = minus_inv_sqrt2.times(x);
      const T lost = fma_of(x, minus_inv_sqrt2.hi, -z) + x * minus_inv_sqrt2.lo;  // -x / sqrt(2) - z
      const T erfc_z = erfc_of(z);
      const T correction = lost * T(kTwoOverSqrtPi) * exp_of(-z * z);
      return {T(0.5) * (lost - lost == T(0) ? erfc_z - correction : erfc_z), pdf};
#endif
    }
  }
#ifndef __CUDA_ARCH__
  // Phi(x) and phi(x) for a 16-bit result on the CPU: float_math::normal_tail's form, Phi(-a) = E t Q(t) and
  // phi = E / sqrt(2 pi) from one exponential E = exp(-a^2 / 2), with shorter pieces: t = 1 / (1 + 3 a / 8), Q of
  // degree 4 (a Lawson fit to Phi(-a) exp(a^2 / 2) / t on a in [0, 14.47], relative error 2^-14.9),
  // host_float::exp2_scaled_for_16bit (2^-13.7; Q and 1 / sqrt(2 pi) carry its 2^-100), a^2 in one part (its
  // rounding, magnified up to 105 times: 2^-17.3). Phi(-a), emulated in float on 2 million a where it is a normal
  // float: within 2^-13.1, under half an ulp of float16 (2^-12 relative at the least) with room for the final
  // product's rounding. The GPU's 16-bit formula above, with this exponential, ran slower on the CPU than the
  // float form (2^18 bfloat16 elements, one thread: 0.43 ns an element against 0.40), its exponential waiting on
  // the division and a polynomial. This one took 0.30 with a degree-5 Q and a degree-4 exp2 (2^-16), 0.26 with
  // these (torch's, with its less accurate erf: 0.21-0.22), 0.21 once bfloat16 was rounded by instruction
  // (store_bfloat16s in cpu_kernels.cpp), and 0.19 with a's clamp an integer minimum.
  static Normal normal_16bit_on_cpu(float x) {
    const float a = float_math::tail_magnitude(x);
    const float e = host_float::exp2_scaled_for_16bit(a * a, float(-0.5 * kLog2e));
    const float t = 1.0f / fmaf(a, 0.375f, 1.0f);
    constexpr float kScale = 7.88860905221011805e-31f;  // 2^-100
    float q = fmaf(-9.033675550e-02f * kScale, t, 1.996007617e-01f * kScale);
    q = fmaf(q, t, 8.409058445e-02f * kScale);
    q = fmaf(q, t, 1.575686592e-01f * kScale);
    q = fmaf(q, t, 1.490785590e-01f * kScale);
    const float tail = e * (t * q);
    return {x < 0.0f ? tail : 1.0f - tail, e * float(kInvSqrt2Pi * kScale)};
  }
#endif
  // Q(t) = log2(Phi(-a) / t) + a^2 log2(e) / 2 with t = 1 / (1 + a / (2 sqrt(2))), a >= 0: a degree-5 fit on
  // t in [0.15, 1] (a <= 16, past which a 16-bit result is 0), within 2^-16.9 of Q in relative terms of Phi;
  // over every float16 and bfloat16 input, emulated in float, the result is correctly rounded or one ulp off.
  // (erfcc's degree-9 polynomial, accurate to 2^-23, held the 16-bit forward to 95 % of the copy rate.)
  static ACTIVATION_FN T tail_exponent_16bit(T t) {
    T q = fma_of(T(0.330086917f), t, T(-1.0231812f));
    q = fma_of(q, t, T(0.684586823f));
    q = fma_of(q, t, T(0.367064893f));
    q = fma_of(q, t, T(1.46868753f));
    return fma_of(q, t, T(-2.82723379f));
  }
  // |x| clamped at 100, for the tanh form: past it s (1 - s) is 0 and s is 0 or 1 already (|2u| > 7e4), and nothing
  // overflows (x^3 would past 1e19, and 0 * inf give NaN). One instruction (a minimum, |x| an operand modifier on
  // the GPU); NaN becomes 100, and x itself carries the NaN into every result.
  static ACTIVATION_FN T magnitude_100(T x) { return smaller_of(fabs(x), T(100)); }
  // (2u)' = 2 sqrt(2 / pi) (1 + 3 * 0.044715 x^2), for the tanh form.
  ACTIVATION_FN T two_u_derivative(T x) const {
    const T a = magnitude_100(x);
    if constexpr (k16BitResult && kCheap16BitMath) {  // the constants folded in, a rounding of float (2^-24) more
      return fma_of(T(2 * kSqrt2OverPi * 3 * kCubic) * a, a, T(2 * kSqrt2OverPi));
    } else {
      return T(2 * kSqrt2OverPi) * fma_of(T(3 * kCubic) * a, a, T(1));
    }
  }
  // sigmoid(2u) and 1 - sigmoid(2u) for the tanh form, from |2u| = a (c1 + c3 a^2) with a = |x| (magnitude_100)
  // and the sign of x (2u is odd in x). |2u| is formed in two parts (the exponential in sigmoid magnifies its
  // rounding |2u| times): a^2 and c3 a^2 keep their rounding errors (fma), the sum of the two non-negative terms c1
  // and c3 a^2 its own by Fast2Sum with the larger first, and the product with a its own; the terms left out are
  // below 2^-44 of 2u. Where 2u was 2 sqrt(2 / pi) (x + 0.044715 x^3), the sum by Knuth's two-sum and each product
  // in two parts, with a guard against an infinite 2u, the float32 forward's math took 162 SASS instructions for 4
  // elements on the GPU; now 134 (the erf form's: 131). On the H200 it runs at the copy rate (3.01 ms where it took
  // 3.14-3.19, torch's 3.04, already with 2u from x clamped at +-100, 142 instructions); the CPU's forward took 6 %
  // less time.
  ACTIVATION_FN SigmoidPair<T> sigmoid_two_u(T x) const {
    const bool negative = x < T(0);
    if constexpr (k16BitResult && kCheap16BitMath) {
      const T a = fabs(x);
      return SigmoidPair<T>(negative, T(2 * kSqrt2OverPi) * fma_of(T(kCubic) * a * a, a, a), T(0), true);
    } else {
      const T a = magnitude_100(x);
      const Product<T> square(a, a);
      const T scaled = cubic.hi * square.hi;  // c3 a^2
      const T scaled_lo =
          fma_of(cubic.hi, square.lo, fma_of(cubic.lo, square.hi, fma_of(cubic.hi, square.hi, -scaled)));
      const T sum = linear.hi + scaled;
      const T larger = larger_of(scaled, linear.hi), smaller = smaller_of(scaled, linear.hi);
      const T sum_lo = ((larger - sum) + smaller) + (scaled_lo + linear.lo);
      const T two_u = a * sum;
      return SigmoidPair<T>(negative, two_u, fma_of(a, sum_lo, fma_of(a, sum, -two_u)));
    }
  }

  ACTIVATION_FN T forward(T x) const { return x * (tanh_form ? sigmoid_two_u(x).s : normal(x).cdf); }
  ACTIVATION_FN T backward(T grad, T x) const {
    if (tanh_form) {  // d/dx x s(2u) = s + x s (1 - s) (2u)'
      const SigmoidPair<T> p = sigmoid_two_u(x);
      return grad * fma_of(x * (p.s * p.one_minus_s), two_u_derivative(x), p.s);
    }
    const Normal n = normal(x);
    return grad * fma_of(x, n.pdf, n.cdf);  // Phi + x phi
  }
  ACTIVATION_FN T second_derivative(T x) const {
    if (tanh_form) {  // s' = s (1 - s) v with v = (2u)'; f'' = 2 s' + x (s (1 - s) v' + s' (1 - 2 s) v)
      const SigmoidPair<T> p = sigmoid_two_u(x);
      const T s = p.s;
      const T slope = p.s * p.one_minus_s;
      const T v = two_u_derivative(x);
      const T s_prime = slope * v;
      const T v_prime = T(2 * kSqrt2OverPi * 6 * kCubic) * copysign(magnitude_100(x), x);
      return T(2) * s_prime + x * (slope * v_prime + s_prime * (T(1) - T(2) * s) * v);
    }
    return normal(x).pdf * (T(2) - x * x);  // phi (2 - x^2)
  }
};

// softplus(x) = log1p(exp(beta x)) / beta, and x itself where beta x > threshold (torch's switch, which keeps
// the derivative's jump there too). args: beta, threshold. f' = sigmoid(beta x), f'' = beta s (1 - s); 1 and 0
// past the threshold. beta x is held in two parts: on the tiny side the result is ~exp(beta x) / beta.
template <class T, bool k16BitResult = false>
struct Softplus {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = false;
  Coefficient<T> beta;
  T threshold;
  // 1 / beta, for a 16-bit result: a division there (even by beta = 1) held the forward to 93 % of the copy rate on
  // the H100, and the reciprocal's rounding (2^-24) is far below a 16-bit ulp.
  T inverse_beta;
  ACTIVATION_FN explicit Softplus(const double* args)
      : beta(args[0]), threshold(T(args[1])), inverse_beta(T(1.0 / args[0])) {}
  ACTIVATION_FN T beta_x(T x) const { return beta.times(x); }
  ACTIVATION_FN T forward(T x) const {
    const T z = beta_x(x);
    // The cheap exponential and logarithm; log1p's series where 1 + e would round.
    if constexpr (k16BitResult && kCheap16BitMath) {
      const T e = exp_for_16bit(z);
      const T small = e * fma_of(e, fma_of(e, T(1.0 / 3), T(-0.5)), T(1));  // relative error below e^3 / 4
      const T log_one_plus = e < T(0.03125) ? small : log_for_16bit(T(1) + e);
      return z > threshold ? x : log_one_plus * inverse_beta;
    }
    const T lost = fma_of(x, beta.hi, -z) + x * beta.lo;  // beta x - z, what z's rounding lost
#ifdef __CUDA_ARCH__
    // log1p(exp(z)): CUDA's exp and log1p take their special cases inside either way, so the CPU's form below only
    // adds to them there (on the H100 its float64 forward took 13.16 ms where this one takes 12.36, torch's
    // 12.63-12.73; float32 at the copy rate in both).
    const T e = exp_of(z);
    const T result = log1p_of(lost - lost == T(0) ? fma_of(e, lost, e) : e);  // lost: finite only
#else
    // softplus(z) = max(z, 0) + log1p(exp(-|z|)): an exponential of a number <= 0, which needs no overflow clamp,
    // and a log1p of a number in [0, 1], which needs no special cases (log1p(exp(z)) took both: 99 vector
    // instructions for 16 float32 elements in the loop, 83 now; one thread in cache on a Zen 4 EPYC, 1.64 -> 1.43
    // ns an element). z + lost is in two parts: exp(-|z + lost|) = e (1 -+ lost) to first order, and for z > 0
    // lost is added beside.
    const T lost_finite = lost - lost == T(0) ? lost : T(0);
    const bool positive = z > T(0);
    const T e = exp_nonpositive_of(positive ? -z : z);
    const T tail = log1p_arithmetic_of(fma_of(e, positive ? -lost_finite : lost_finite, e));  // of [0, 1] or NaN
    const T result = positive ? z + (tail + lost_finite) : tail;
#endif
    // beta = 1, torch's default, skips the division (a uniform branch: every thread takes the same side).
    return z > threshold ? x : (beta.hi == T(1) ? result : result / beta.hi);
  }
  // beta x as a plain product, as torch's softplus_backward forms it: exact for beta = 1 (the default) and every
  // power of two; otherwise its rounding error (up to twice that of the correctly rounded product) is magnified
  // |beta x| times by the exponential in sigmoid, as the rounding of any float z = beta x would be. (The correctly
  // rounded product, Coefficient::times, held the CPU's float32 backward to 0.77x of torch's.)
  ACTIVATION_FN T backward(T grad, T x) const {
    const T z = x * beta.hi;
    return z > threshold ? grad : grad * sigmoid_pair<k16BitResult>(z).s;
  }
  ACTIVATION_FN T second_derivative(T x) const {
    const T z = beta_x(x);
    const SigmoidPair<T> p(z);
    return z > threshold ? T(0) : beta.hi * p.s * p.one_minus_s;
  }
};

// softsign(x) = x / (1 + |x|), written as torch's F.softsign, so that +-inf give NaN as there (inf / inf);
// f' = 1 / (1 + |x|)^2 and f'' = -2 sign(x) / (1 + |x|)^3, both NaN at +-inf as torch's autograd gives.
template <class T, bool = false>
struct Softsign {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = false;
  ACTIVATION_FN explicit Softsign(const double*) {}
  ACTIVATION_FN T forward(T x) const { return x / (T(1) + fabs(x)); }
  // f' rounded once. Squaring a rounded 1 / (1 + |x|) doubles the errors of the sum and the division, and the
  // product with the gradient can double an error counted in ulps again (float32: 4.15 ulp at a random gradient).
  // So 1 + |x| is held exactly as d + e (Fast2Sum), 1 / (d + e) = r (1 + c) to first order with r = 1 / d and
  // c = (1 - r d) - r e, and f' = r^2 (1 + 2c) = p + (p_lo + 2 c p) with p + p_lo = r^2 exactly.
  static ACTIVATION_FN T derivative(T x) {
    const T a = fabs(x);
    const T d = T(1) + a;
    const T e = one_plus_error(a, d);
    const T r = T(1) / d;
    const T c = fma_of(-r, d, T(1)) - r * e;
    const T p = r * r;
    return p + fma_of(T(2) * c, p, fma_of(r, r, -p));
  }
  ACTIVATION_FN T backward(T grad, T x) const { return fabs(x) == T(INFINITY) ? T(NAN) : grad * derivative(x); }
  ACTIVATION_FN T second_derivative(T x) const {
    const T r = T(1) / (T(1) + fabs(x));
    const T sign = x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    return fabs(x) == T(INFINITY) ? T(NAN) : T(-2) * sign * (r * r * r);
  }
};

// mish(x) = x tanh(softplus(x)). With e = exp(x) and n = e (e + 2), tanh(log1p(e)) = n / (n + 2): one exponential
// and one division, accurate on both sides (n / (n + 2) ~ e where e is tiny). Past x = 20 the tanh is 1 in
// double already; the clamp keeps e^2 finite. With t = tanh(softplus(x)) and s = sigmoid(x):
// f' = t + x s (1 - t^2), f'' = s (1 - t^2) (2 + x (1 - s) - 2 x s t).
template <class T, bool k16BitResult = false>
struct Mish {
  static constexpr bool kMask = false, kFromInput = true, kFromOutput = false;
  ACTIVATION_FN explicit Mish(const double*) {}
  // t = tanh(softplus(x)) = n / (n + 2) and 1 - t^2 = (1 - t)(1 + t) with 1 - t = 2 / (n + 2), exact where t ~ 1.
  struct TanhSoftplus {
    T t, one_minus_t_squared;
  };
  // n = e (e + 2) with e = exp(x), x clamped at 20 (where t = 1 in double already), as one fma: one rounding
  // fewer than e * (e + 2) (float32 forward over every 4099th input on the CPU: 3.45 ulp before, 2.88 after).
  // kCheapExp: e from exp_for_16bit, for a 16-bit result.
  template <bool kCheapExp = false>
  static ACTIVATION_FN T numerator(T x) {
    const T clamped = x < T(20) ? x : T(20);
    T e;
    if constexpr (kCheapExp) {
      e = exp_for_16bit(clamped);
    } else {
      e = exp_of(clamped);
    }
    return fma_of(e, e, T(2) * e);
  }
  ACTIVATION_FN TanhSoftplus tanh_softplus(T x) const {
    const T n = numerator(x);
    const T r = reciprocal_at_least_one(n + T(2));  // n + 2 <= 2.4e17
    const T t = n * r;
    return {t, (T(2) * r) * (T(1) + t)};
  }
  ACTIVATION_FN T forward(T x) const {
    // For a 16-bit result on the GPU, __expf and one approximate reciprocal, as the 16-bit backward takes them:
    // about 14 instructions where expf and the division (with its range check and slow path) took 28.
    constexpr bool kCheap = k16BitResult && kCheap16BitMath;
    const T n = numerator<kCheap>(x);
    if constexpr (kCheap) return x * (n * reciprocal_for_16bit(n + T(2)));
    return x * (n / (n + T(2)));
  }
  // Past x = 20 the derivative is t = 1 (the second term is below 1e-16): so also at +inf, where x * (1 - t^2)
  // would be inf * 0 (torch's mish_backward gives NaN there).
  ACTIVATION_FN T backward(T grad, T x) const {
    if constexpr (k16BitResult) {  // one cheap exponential for t and s = e / (1 + e) alike, cheap reciprocals
      const T e = exp_for_16bit(x < T(20) ? x : T(20));
      const T n = e * (e + T(2));
      const T r = reciprocal_for_16bit(n + T(2));
      const T t = n * r;
      const T s = e * reciprocal_for_16bit(T(1) + e);
      return grad * (!(x >= T(20)) ? fma_of(x * s, (T(2) * r) * (T(1) + t), t) : T(1));
    }
    const TanhSoftplus t = tanh_softplus(x);
    return grad * (!(x >= T(20)) ? fma_of(x * sigmoid_of(x), t.one_minus_t_squared, t.t) : T(1));
  }
  ACTIVATION_FN T second_derivative(T x) const {
    const TanhSoftplus t = tanh_softplus(x);
    const SigmoidPair<T> p(x);
    return p.s * t.one_minus_t_squared * (T(2) + x * p.one_minus_s - T(2) * x * p.s * t.t);
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The per-element operations the elementwise kernels of both devices map: compute-type values in, compute-type
// value out. Named types (not lambdas), so that CPU kernels of different storage types share one instantiation.
template <class F>
struct Forward {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C x) const { return f.forward(x); }
};
// grad * f'(x), from the input or the output.
template <class F, bool kFromOutput>
struct Backward {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C grad, C saved) const {
    if constexpr (kFromOutput) {
      return f.backward_from_output(grad, saved);
    } else {
      return f.backward(grad, saved);
    }
  }
};
// The derivative of grad * f'(saved) with respect to saved, times the incoming grad_grad: f'' from the input, or
// d f' / dy from the output.
template <class F, bool kFromOutput>
struct DoubleBackward {
  F f;
  template <class C>
  ACTIVATION_FN C operator()(C grad_grad, C grad, C saved) const {
    if constexpr (kFromOutput) {
      return grad_grad * grad * f.second_derivative_from_output(saved);
    } else {
      return grad_grad * grad * f.second_derivative(saved);
    }
  }
};
// The backward of the piecewise-linear ops from their bit: grad * passing or grad * blocked.
template <class T>
struct MaskBackward {
  Coefficient<T> passing, blocked;
  bool blocked_is_zero;
  ACTIVATION_FN MaskBackward(double passing_, double blocked_)
      : passing(passing_), blocked(blocked_), blocked_is_zero(blocked_ == 0.0) {}
  ACTIVATION_FN T operator()(T grad, bool passes) const {
    return passes ? passing.times(grad) : (blocked_is_zero ? T(0) : blocked.times(grad));
  }
};

}  // namespace activations
