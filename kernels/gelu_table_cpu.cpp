// The float32 GELU (erf form) forward on AVX-512 CPUs: gelu(x) = x Phi(x) with Phi(-|x|), the normal distribution's
// lower tail, read from a table of polynomials where x >= -4.75, and the generic formula (float_math::normal_tail
// in activations.cuh: an exponential, a division and a degree-8 polynomial) below.
//
// Why: the generic formula's loop is 33 vector instructions for 16 elements, torch's oneDNN kernel about 23 (a
// table polynomial for erf that forms 1 + erf, so without relative accuracy in the lower tail: its gelu(-5) is
// 10 % off), and the float32 GELU forward was the one CPU cell of bench.py below torch's (0.76x on the 2-core
// Emerald Rapids Xeon). The table form is 22 and six register copies: a = min(|x|, 8) (one vrangeps), piece
// k = trunc(4 a) of 32 and d = a - k / 4 (exact: vreduceps), 7 coefficients picked from registers by vpermt2ps and
// a degree-6 polynomial in d, the select of Phi(-a) or 1 - Phi(-a), the product, the test for elements below -4.75.
// Piece k approximates Phi(-a) on [k / 4, (k + 1) / 4) to a relative 3.9e-8 for a < 4.75 (tools/gelu_table_fit.py):
// on the negative side it has float's relative accuracy there, and on the positive side, where Phi(x) =
// 1 - Phi(-a) needs only absolute accuracy, its pieces reach a = 8 (1 - Phi(-a) rounds to 1 from 5.42 on, so the
// clamp at 8 changes nothing). Below -4.75 the tail falls too fast for a polynomial of this degree on a quarter;
// there the exponential's formula stays. Over every float32 input (tools/cpu_gelu_table.cpp): within 2.97 ulp
// where x >= -4.75, 5.06 over all (the generic formula's, below -4.75), under GELU's bound of 9.
//
// Each element's result depends on its own x only, never on its neighbours: the lanes below -4.75 of a block of
// 1024 elements are packed together (vcompressps), run through the generic loop, and written back into their
// places (vexpandps), so a tensor's elements get the same bits wherever they sit in it. One thread, in cache, on
// the Emerald Rapids Xeon before the two ways of packing below, ns an element (tools/cpu_gelu_table.cpp): standard
// normal inputs 0.29 where the generic loop takes 0.46 (and oneDNN 0.36); with standard deviation 3 (5.5 % of the
// elements below -4.75) 0.42 against 0.47. The inputs with many elements below -4.75 pay for both forms there:
// uniform on [-12, 12] (30 %) 0.58 against 0.46.
// How the lanes are packed depends on how many there are, the result not: behind a branch on each vector where the
// last block had at most kDenseFarLanes of them, else without one. Where a few percent of the elements were below
// -4.75 the branch went wrong every few vectors, and out of cache the loop lost the overlap of its loads with its
// arithmetic. Zen 4, one thread, ns an element (results/cpu-epyc-2026-12-07/gelu_far_lanes_ab.log), always behind
// the branch -> as now: 2^22 elements (GELU_N=4194304 tools/cpu_gelu_table.cpp), standard deviation 3 (5.7 %
// below) 0.71 -> 0.47, 5 (17 %) 0.60 -> 0.54, uniform on [-12, 12] 0.63 -> 0.59 (the generic loop 0.50),
// deviations 1 and 2 (0.9 %) 0.29 and 0.40 either way; in cache, deviation 3 0.43 -> 0.47-0.52, 5 0.55-0.57 ->
// 0.52-0.54, uniform 0.62 -> 0.58-0.60.
#include "gelu_table_cpu.h"

#ifdef ACTIVATIONS_CPU_AVX512
#include <immintrin.h>

#include <algorithm>

namespace activations {
namespace {

// kPhiTail[j][k]: coefficient j of piece k, Phi(-a) ~ sum_j kPhiTail[j][k] (a - k / 4)^j on [k / 4, (k + 1) / 4)
// (printed by tools/gelu_table_fit.py).
alignas(64) constexpr float kPhiTail[7][32] = {
    {5.000000000e-01f, 4.012936652e-01f, 3.085375428e-01f, 2.266273499e-01f,
     1.586552560e-01f, 1.056497768e-01f, 6.680720299e-02f, 4.005915672e-02f,
     2.275013179e-02f, 1.222447306e-02f, 6.209665444e-03f, 2.979763318e-03f,
     1.349898055e-03f, 5.770250573e-04f, 2.326290851e-04f, 8.841728413e-05f,
     3.167124305e-05f, 1.068852544e-05f, 3.397673026e-06f, 1.017083150e-06f,
     2.866515558e-07f, 7.604959507e-08f, 1.898956015e-08f, 4.462171521e-09f,
     9.865873674e-10f, 2.052262527e-10f, 4.015998298e-11f, 7.392252609e-12f,
     1.279811326e-12f, 2.083855414e-13f, 3.190886276e-14f, 4.594617567e-15f},
    {-3.989422917e-01f, -3.866656125e-01f, -3.520664573e-01f, -3.011367619e-01f,
     -2.419712842e-01f, -1.826499104e-01f, -1.295180470e-01f, -8.627727628e-02f,
     -5.399092287e-02f, -3.173975646e-02f, -1.752833091e-02f, -9.093583561e-03f,
     -4.431854468e-03f, -2.029051771e-03f, -8.726841188e-04f, -3.525953798e-04f,
     -1.338304573e-04f, -4.771853492e-05f, -1.598370909e-05f, -5.029479780e-06f,
     -1.486713245e-06f, -4.128439173e-07f, -1.076966996e-07f, -2.639211871e-08f,
     -6.075787429e-09f, -1.313973708e-09f, -2.669483801e-10f, -5.094764541e-11f,
     -9.134325241e-12f, -1.538453392e-12f, -2.434155308e-13f, -3.617993492e-14f},
    {6.970270192e-07f, 4.822018743e-02f, 8.806741983e-02f, 1.128965616e-01f,
     1.210102215e-01f, 1.141922325e-01f, 9.715802968e-02f, 7.549075037e-02f,
     5.398906395e-02f, 3.571166471e-02f, 2.191170305e-02f, 1.250455994e-02f,
     6.648034789e-03f, 3.297359683e-03f, 1.527251792e-03f, 6.611018907e-04f,
     2.676677832e-04f, 1.013968067e-04f, 3.596158786e-05f, 1.194366268e-05f,
     3.716429774e-06f, 1.083549137e-06f, 2.961157861e-07f, 7.586043438e-08f,
     1.822222373e-08f, 4.104693918e-09f, 8.672005336e-10f, 1.718569453e-10f,
     3.194956452e-11f, 5.572564979e-12f, 9.119683090e-13f, 1.400453375e-13f},
    {6.647611409e-02f, 6.230748817e-02f, 4.315729067e-02f, 2.245470881e-02f,
     -4.086458066e-04f, -1.772303879e-02f, -2.730647288e-02f, -2.962647192e-02f,
     -2.696483396e-02f, -2.156447433e-02f, -1.535900775e-02f, -9.960913099e-03f,
     -5.913403351e-03f, -3.236271441e-03f, -1.637128647e-03f, -7.673421642e-04f,
     -3.346469894e-04f, -1.355928689e-04f, -5.124060044e-05f, -1.804641579e-05f,
     -5.938595223e-06f, -1.823978550e-06f, -5.238500194e-07f, -1.406411911e-07f,
     -3.532290904e-08f, -8.301598520e-09f, -1.826464757e-09f, -3.762769540e-10f,
     -7.259909340e-11f, -1.312142235e-11f, -2.222117889e-12f, -3.526514204e-13f},
    {1.333433611e-04f, -2.615502104e-02f, -1.373006683e-02f, -2.669040486e-02f,
     -1.710952260e-02f, -9.195720777e-03f, -3.663576208e-03f, 1.575381175e-04f,
     4.275104962e-03f, 6.690263748e-03f, 6.098902319e-03f, 4.865684081e-03f,
     3.356247442e-03f, 2.095920732e-03f, 1.182817155e-03f, 6.067873910e-04f,
     2.900090767e-04f, 1.262253063e-04f, 5.125785538e-05f, 1.919454371e-05f,
     6.723576007e-06f, 2.179064722e-06f, 6.597060178e-07f, 1.858176972e-07f,
     4.882517146e-08f, 1.197172317e-08f, 2.742028160e-09f, 5.868423525e-10f,
     1.173807995e-10f, 2.195267926e-11f, 3.840947092e-12f, 6.287938377e-13f},
    {-1.059507392e-02f, 4.166823626e-02f, -2.714635804e-02f, 1.330195274e-02f,
     -6.498879753e-03f, -9.475448169e-03f, -2.412265865e-03f, 5.138218403e-03f,
     3.000221448e-03f, -1.474273857e-03f, -1.262598438e-03f, -1.523938961e-03f,
     -1.226064051e-03f, -9.267408750e-04f, -5.941384006e-04f, -3.290000313e-04f,
     -1.788645895e-04f, -8.235789574e-05f, -3.632568405e-05f, -1.434233764e-05f,
     -5.399229394e-06f, -1.836232968e-06f, -5.865984463e-07f, -1.727095480e-07f,
     -4.728797265e-08f, -1.204065203e-08f, -2.857674097e-09f, -6.322934398e-10f,
     -1.304391178e-10f, -2.510808922e-11f, -4.514660347e-12f, -7.583202729e-13f},
    {1.393992454e-03f, -6.377484649e-02f, 3.286497667e-02f, -1.445008721e-02f,
     1.542928908e-02f, 2.042331547e-02f, 9.912220761e-03f, -2.446306637e-03f,
     -2.248722361e-03f, 1.652040984e-03f, 3.801005078e-04f, 4.774080007e-04f,
     2.963613952e-04f, 2.726367675e-04f, 1.882683864e-04f, 1.010945489e-04f,
     6.694795593e-05f, 3.063603799e-05f, 1.483145388e-05f, 5.989059446e-06f,
     2.452568424e-06f, 8.602132766e-07f, 2.891006829e-07f, 8.805896101e-08f,
     2.487787754e-08f, 6.513497741e-09f, 1.587209586e-09f, 3.598815412e-10f,
     7.590814782e-11f, 1.491207158e-11f, 2.733572483e-12f, 4.674748002e-13f},
};
constexpr float kTableFrom = -4.75f;  // x below it: the generic formula
constexpr float kLargestMagnitude = 7.99999952f;  // the largest float below 8: a stays in piece 31
constexpr int64_t kBlock = 1024;
constexpr int kDenseFarLanes = 32;  // see the head of this file

#define ACTIVATIONS_TABLE_LOOP \
  __attribute__((target("avx512f,avx512dq"), optimize("gcse", "no-thread-jumps", "expensive-optimizations")))

// The elements of a block below kTableFrom: their inputs packed in x, the generic loop's results in y, and for
// each vector of 16 that holds any, its first element and the lanes.
struct FarLanes {
  alignas(64) float x[kBlock + 16];  // + 16: each vector's packed lanes are stored as a whole vector
  alignas(64) float y[kBlock];
  int64_t vector_at[kBlock / 16];
  __mmask16 lanes[kBlock / 16];
  int count, vectors;
};

// The table in registers: coefficient j of pieces 0-15 in low[j], of pieces 16-31 in high[j].
struct Coefficients {
  __m512 low[7], high[7];
};

// gelu(x) by the table, for the 16 lanes of x. (Functions, not lambdas, with the target attribute: a lambda does not
// take its enclosing function's target, and clang refuses intrinsics in it.)
ACTIVATIONS_TABLE_LOOP __attribute__((always_inline)) inline __m512 gelu_by_table(const Coefficients& c, __m512 x) {
  // a = min(|x|, largest) (imm 0x0a: the smaller magnitude, sign cleared; NaN stays NaN and x carries it).
  const __m512 a = _mm512_range_ps(x, _mm512_set1_ps(kLargestMagnitude), 0x0a);
  const __m512i piece = _mm512_cvttps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(4.0f)));
  const __m512 d = _mm512_reduce_ps(a, (2 << 4) | _MM_FROUND_TO_ZERO);  // a - trunc(4 a) / 4, exact
#define ACTIVATIONS_COEFFICIENT(j) _mm512_permutex2var_ps(c.low[j], piece, c.high[j])
  __m512 tail = ACTIVATIONS_COEFFICIENT(6);  // Phi(-a)
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(5));
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(4));
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(3));
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(2));
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(1));
  tail = _mm512_fmadd_ps(tail, d, ACTIVATIONS_COEFFICIENT(0));
#undef ACTIVATIONS_COEFFICIENT
  // Phi(x): 1 - Phi(-a) where x >= 0 (-0 included: -0 times 1/2 keeps its sign), Phi(-a) where x < 0 or NaN.
  const __mmask16 non_negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mul_ps(x, _mm512_mask_sub_ps(tail, non_negative, _mm512_set1_ps(1.0f), tail));
}

// The lanes of x (the vector at element i of the block) below kTableFrom, packed into far, which holds count and
// vectors until the block's end (in registers: far's own would go through memory, as the vector stores may alias
// them). kBranchFree: every vector is recorded, lanes or none; else only those with lanes, behind a branch.
template <bool kBranchFree>
ACTIVATIONS_TABLE_LOOP __attribute__((always_inline)) inline void pack_far_lanes(__m512 x, int64_t i, FarLanes& far,
                                                                              int& count, int& vectors) {
  const __mmask16 lanes = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kTableFrom), _CMP_LT_OQ);
  if (kBranchFree || __builtin_expect(lanes != 0, 0)) {
    _mm512_storeu_ps(far.x + count, _mm512_maskz_compress_ps(lanes, x));
    count += __builtin_popcount(lanes);
    far.vector_at[vectors] = i;
    far.lanes[vectors++] = lanes;
  }
}

// y = gelu(x) by the table for n <= kBlock elements, the lanes below kTableFrom (whose results it writes are
// replaced) packed into far. The table's 14 registers are loaded once per call and the loop calls nothing, so they
// stay in registers.
template <bool kBranchFree>
ACTIVATIONS_TABLE_LOOP __attribute__((noinline)) void table_block(int64_t n, const float* x, float* y,
                                                                  FarLanes& far) {
  Coefficients c;
#define ACTIVATIONS_PIECES(j) c.low[j] = _mm512_load_ps(kPhiTail[j]), c.high[j] = _mm512_load_ps(kPhiTail[j] + 16);
  ACTIVATIONS_PIECES(0) ACTIVATIONS_PIECES(1) ACTIVATIONS_PIECES(2) ACTIVATIONS_PIECES(3) ACTIVATIONS_PIECES(4)
  ACTIVATIONS_PIECES(5) ACTIVATIONS_PIECES(6)
#undef ACTIVATIONS_PIECES
  int count = 0, vectors = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, gelu_by_table(c, v));
    pack_far_lanes<kBranchFree>(v, i, far, count, vectors);
  }
  if (i < n) {  // the last lanes; those masked off read 0, which is not below kTableFrom
    const __mmask16 lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
    _mm512_mask_storeu_ps(y + i, lanes, gelu_by_table(c, v));
    pack_far_lanes<kBranchFree>(v, i, far, count, vectors);
  }
  far.count = count;
  far.vectors = vectors;
}

// The packed results of far into y, each into its element's place.
ACTIVATIONS_TABLE_LOOP void unpack(const FarLanes& far, float* y) {
  const float* from = far.y;
  for (int k = 0; k < far.vectors; ++k) {
    const __mmask16 lanes = far.lanes[k];
    _mm512_mask_storeu_ps(y + far.vector_at[k], lanes, _mm512_maskz_expandloadu_ps(lanes, from));
    from += __builtin_popcount(lanes);
  }
}

}  // namespace

void gelu_forward_by_table(int64_t n, const float* x, float* y, GeluLoop generic) {
  FarLanes far;
  bool dense = false;  // whether the last block had more than kDenseFarLanes elements below kTableFrom
  for (int64_t first = 0; first < n; first += kBlock) {
    (dense ? table_block<true> : table_block<false>)(std::min(kBlock, n - first), x + first, y + first, far);
    if (far.count > 0) {
      generic(far.count, far.x, far.y);
      unpack(far, y + first);
    }
    dense = far.count > kDenseFarLanes;
  }
}

}  // namespace activations
#endif  // ACTIVATIONS_CPU_AVX512
