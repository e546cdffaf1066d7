// Softmax and log_softmax on the CPU (softmax.h): part of cpu_kernels.cpp's unit (included at its end), whose
// loop machinery it shares (load and store, widen and narrow, ACTIVATIONS_CPU_WIDE_LOOP, parallel), so the loops
// are compiled for AVX2 + FMA, or AVX-512, where the elementwise one is and call the same inline exp (exp_of). On a
// 2-core AMD EPYC with AVX-512, 512-bit loops took the 48 cells of bench.py --softmax from a median of 0.65x
// torch's speed (44 cells below 1.0x) to 1.005x (21 below).
//
// A row (inner == 1) takes three passes: its max, then softmax's exponentials (kept) and their sum, or
// log_softmax's sum of exp(x - max), then the output; a slab of columns
// (inner > 1) the same passes, a block of columns at a time, so that every inner loop runs along memory; rows
// shorter than a vector go through the column passes transposed, a block of rows at a time (kShortRow), and rows
// of one to kRegisterVectors vectors of floats (float, float16, bfloat16: 16-128 elements with AVX-512) are held
// in registers, a row at a time (RegisterRow), their sums in float lanes. The max
// ignores NaN and the sum carries it: a row with a NaN sums to NaN, and so does a row of -inf (-inf - -inf), so
// both give NaN everywhere, as torch's. Sums go kSoftmaxBlock terms at a time into a vector of partial sums in
// double (reduce_in_lanes; bfloat16 rows' in float, by omp simd), whose total is added to the row's sum in Sum:
// double for float rows, long double for float64 ones. (float64 rows summed whole in a vector of doubles were off
// by up to 510 ulp at n = 50257, against the tests' bound of about sqrt(n) ulp.)
// (The first version, in softmax.cpp's torch glue, ran a row's loops one element wide with libm's exp and long
// double sums for float64: 0.05-0.2x torch's speed on 2 cores, measured with other work on the machine.)
#include <cmath>
#include <limits>
#include <vector>

#include "softmax.h"

namespace activations {
namespace {

// Elements of a row whose terms one vector of partial sums adds up; the columns of a slab handled at a time, and
// the steps of n whose terms a column sums in double before adding them to its Sum.
constexpr int64_t kSoftmaxBlock = 1024;
constexpr int64_t kSoftmaxColumns = 256;
constexpr int64_t kSoftmaxSteps = 256;

template <class C>
using Sum = std::conditional_t<std::is_same_v<C, double>, long double, double>;

// log(sum) in double: the sum rounded to double first costs half an ulp of double in the result, and libm's long
// double log took about 50 ns a call (float64 log_softmax over rows of 4 ran at 0.13x torch's).
inline double log_of_sum(long double sum) { return std::log(static_cast<double>(sum)); }

// The type of the partial sums of a run of terms: double, or float where the operands are float16 or bfloat16
// (T itself, or float16 widened into float: the forward's row), whose results are rounded to 16 bits. (The
// backward along a row sums float32 in float too: backward_sum.) A float
// sum of a run of kSoftmaxBlock terms errs by at most 2^-14 of the sum of their magnitudes (an eighth of a float16
// ulp, a sixty-fourth of a bfloat16 one; far less in practice, each lane adding 64 of them). Float partial sums
// take 16 lanes a vector where double takes 8. Over 256 x 1024 in
// cache, one thread, on the 2-core AVX-512 machine, torch/ours: bfloat16 softmax backward 0.71x -> 0.89x, float16
// 0.66x -> 0.81x; log_softmax forward bfloat16 0.85x -> 1.00-1.02x, float16 0.86-0.87x -> 1.04-1.05x; softmax
// forward 1.08-1.16x -> 1.29-1.34x. The column loops' partial sums likewise (bench.py --softmax, over dim 1 of
// 64 x 256 x 64: bfloat16 backward 1.03x -> 1.24x, log_softmax's 1.02x -> 1.33x, float16 0.56-0.80x -> 0.64-0.88x,
// in runs that move float32's unchanged cells by up to 0.4x).
template <class T>
using partial_sum_t = std::conditional_t<sizeof(T) == 2, float, double>;

// A row's max and sums in kLanes running values (vectors of the compute type's width), combined pairwise at the
// end in registers. An omp simd reduction combines its lanes one after another: 16 dependent additions for a
// vector of floats, about 40 % of the sum's time over a row of 32 floats. float32 rows of 16-256, 2 threads,
// torch/ours: 0.57-1.18x -> 0.66-1.26x (short_rows_ab.log).
#if defined(ACTIVATIONS_CPU_AVX512)
constexpr int kVectorBytes = 64;
#elif defined(ACTIVATIONS_CPU_AVX2)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

// A vector of P the loops' width, and its lanes combined pairwise in registers: combine(v, v with lanes k and
// k ^ d swapped) for d = half the lanes, a quarter, ..., 1 leaves the whole combination in every lane.
// (__builtin_shufflevector is clang's and g++ 12's; older g++ has __builtin_shuffle.)
template <class P>
struct Vector {
  typedef P type __attribute__((vector_size(kVectorBytes)));
  typedef std::conditional_t<sizeof(P) == 8, int64_t, int32_t> index_type __attribute__((vector_size(kVectorBytes)));
};
template <int kDistance, class P, size_t... I>
ACTIVATIONS_CPU_WIDE_LOOP inline typename Vector<P>::type swap_lanes(typename Vector<P>::type v,
                                                                     std::index_sequence<I...>) {
#if defined(__clang__) || __GNUC__ >= 12
  return __builtin_shufflevector(v, v, (I ^ kDistance)...);
#else
  return __builtin_shuffle(v, typename Vector<P>::index_type{(I ^ kDistance)...});
#endif
}
template <int kDistance, class P, class Combine>
ACTIVATIONS_CPU_WIDE_LOOP inline P fold_vector(typename Vector<P>::type v, Combine combine) {
  constexpr int kLanes = kVectorBytes / sizeof(P);
  v = combine(v, swap_lanes<kDistance, P>(v, std::make_index_sequence<kLanes>{}));
  if constexpr (kDistance == 1) {
    return v[0];
  } else {
    return fold_vector<kDistance / 2, P>(v, combine);
  }
}
template <class P, class Combine>
ACTIVATIONS_CPU_WIDE_LOOP inline P fold_vector(typename Vector<P>::type v, Combine combine) {
  return fold_vector<kVectorBytes / sizeof(P) / 2, P>(v, combine);
}

// combine(...combine(init, P(term(0, false))), ..., P(term(n - 1, false))) in some order; C is the type term
// computes in, whose vectors set the number of lanes (a term in float summed in double takes two vectors of
// lanes). term(i, true) is a term taken again, whose value is dropped: a term that writes keeps what it wrote then.
// kGrouped (the row loops' sums: the forwards' exponentials, the backward's g y or g): four vectors of terms are
// added in C, pairwise, before their sum joins the lanes, so that a float row summed in double widens one vector of
// sums where it widened every vector of terms (two conversions, an extraction and two additions): two roundings
// more, each at most 2^-24 of the magnitudes summed (2^-23 of the sum in all where the terms are non-negative), as
// much as the float products g y lose already. One thread, 2^16 elements in cache, the trees in turn, two rounds,
// torch/ours (results/cpu-icelake-2026-11-28/softmax_grouped_sums_ab.log): float32 softmax forward over rows of 1024
// 1.07-1.15x -> 1.30-1.38x, of 256 1.07-1.11x -> 1.17-1.23x; log_softmax 0.99-1.01x -> 1.01-1.22x and 0.93-1.00x ->
// 1.09-1.14x; softmax backward over rows of 1024 0.96-1.00x -> 1.04-1.06x (softmax_backward_grouped_sums_ab.log;
// at 2 threads out of cache, 4096 x 1024, 0.90-0.94x -> 0.94-0.96x).
template <class C, bool kGrouped = false, class P, class Combine, class Term>
ACTIVATIONS_CPU_WIDE_LOOP inline P reduce_in_lanes(int64_t n, P init, Combine combine, Term term) {
  constexpr int kLanes = kVectorBytes / sizeof(C), kPerVector = kVectorBytes / sizeof(P);
  alignas(kVectorBytes) P lanes[kLanes];
  for (int k = 0; k < kLanes; ++k) lanes[k] = init;
  int64_t i = 0;
  if constexpr (kGrouped) {
    for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
#pragma omp simd
      for (int k = 0; k < kLanes; ++k) {
        const C first = term(i + k, false) + term(i + kLanes + k, false);
        const C second = term(i + 2 * kLanes + k, false) + term(i + 3 * kLanes + k, false);
        lanes[k] = combine(lanes[k], P(first + second));
      }
    }
  }
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lanes[k] = combine(lanes[k], P(term(i + k, false)));
  }
  if (i < n && n >= kLanes) {
    // The rest as one more vector: the last kLanes terms, those taken already masked out. One element at a time,
    // the float32 rows of 31 took 0.39-0.41x torch's time (15 scalar exponentials).
    const int64_t last = n - kLanes;
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const bool again = last + k < i;
      const P value = P(term(last + k, again));
      lanes[k] = combine(lanes[k], again ? init : value);
    }
  } else {
    for (int k = 0; i + k < n; ++k) lanes[k] = combine(lanes[k], P(term(i + k, false)));
  }
  typename Vector<P>::type v, w;
  memcpy(&v, lanes, kVectorBytes);
  for (int k = kPerVector; k < kLanes; k += kPerVector) {
    memcpy(&w, lanes + k, kVectorBytes);
    v = combine(v, w);
  }
  return fold_vector<P>(v, combine);
}

// Where the row loops reduce in lanes: rows of float and double (and float16's, widened into float). bfloat16 rows
// keep the omp simd reduction: in lanes, g++ vectorized their loops in halves, half the lanes in memory, and
// the bfloat16 softmax forward over rows of 256 ran at 0.72-0.80x torch's against 1.05x (2 threads, 2^21 elements).
template <class T>
constexpr bool kInLanes = std::is_same_v<T, compute_t<T>>;

// The combinations, of scalars and of vectors (compiled for the loops' instruction set, as the loops that inline them).
struct Add {
  template <class A>
  ACTIVATIONS_CPU_WIDE_LOOP A operator()(A a, A b) const { return a + b; }
};
struct Max {
  template <class A>
  ACTIVATIONS_CPU_WIDE_LOOP A operator()(A a, A b) const { return b > a ? b : a; }  // NaN terms are passed over
};
constexpr Add kAdd;
constexpr Max kMax;

// The row loops read and write runs of T: float, double or bfloat16 (converted inside the loop, by load() and
// store(), which g++ vectorizes), or a float buffer that a run of a float16 row was widened into (softmax_half_row:
// g++ vectorizes no float16 conversion; widen() and narrow() use F16C 8 or 16 elements at a time). C is the compute
// type. The column loops below read float16 in place.
template <class T>
ACTIVATIONS_CPU_WIDE_LOOP compute_t<T> max_of(int64_t n, const T* x, compute_t<T> m) {
  if constexpr (kInLanes<T>) return reduce_in_lanes<T>(n, m, kMax, [x](int64_t i, bool) { return x[i]; });
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = load(x[i]) > m ? load(x[i]) : m;
  return m;
}

template <class T, class Partial>
ACTIVATIONS_CPU_WIDE_LOOP double sum_exp(int64_t n, const T* x, compute_t<T> max) {
  if constexpr (kInLanes<T>) {
    return reduce_in_lanes<T, true>(n, Partial(0), kAdd, [x, max](int64_t i, bool) {
      return exp_nonpositive_of(x[i] - max);
    });
  }
  Partial sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += exp_nonpositive_of(load(x[i]) - max);
  return sum;
}

// softmax: e = exp(x - max), returning the sum of e; then y = e / sum as e times the reciprocal (one rounding more
// than a division, inside the bound; the float32 forward with a second exp and a division ran at 0.63x torch's).
// e is in the compute type: the output itself for float and double, a float row for the 16-bit types.
template <class T, class Partial, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP double exp_and_sum(int64_t n, const T* x, C max, C* e) {
  if constexpr (kInLanes<T>) {
    return reduce_in_lanes<T, true>(n, Partial(0), kAdd, [x, max, e](int64_t i, bool again) {
      const C v = exp_nonpositive_of(x[i] - max);  // x may be e: taken again, x[i] is e[i] already, which stays
      e[i] = again ? e[i] : v;
      return v;
    });
  }
  Partial sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const C v = exp_nonpositive_of(load(x[i]) - max);
    e[i] = v;
    sum += v;
  }
  return sum;
}
template <class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void scale(int64_t n, const C* e, C factor, T* y) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = store<T>(e[i] * factor);
}

// log_softmax: y = (x - max) - log(sum).
template <class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void log_softmax_output(int64_t n, const T* x, C max, C log_sum, T* y) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = store<T>((load(x[i]) - max) - log_sum);
}

// sum(g y) (softmax) or sum(g) (log_softmax). float16 goes kHalfStep elements a step through F16C (see load8),
// the terms into kHalfStep partial sums; what remains, and the other types, one loop.
// Partial sums in float for float32 too (double for float64), where the forwards keep double (partial_sum_t). On
// the AMD EPYC of Zen 4, torch/ours with double partial sums -> with float, the trees in turn, two rounds
// (results/cpu-epyc-2026-12-07/softmax_backward_float_sums_ab.log): the float32 softmax backward over 4096 x 1024
// 0.93-0.96x -> 1.11x on one thread, 0.81-0.91x -> 0.91-1.01x on two; over 64 x 50257 0.96-0.98x -> 1.01-1.04x;
// in cache (64 x 1024) 0.98-1.01x -> 1.05-1.12x. Its error grew by at most 1.6x, to 13 % of the bound the tests hold
// it to ((8 + sqrt(n)) eps of the terms' size; rows of 1024-393216, inputs randn and randn x 8:
// softmax_backward_float_sums_error.log); torch sums these in float too.
template <bool kLog, class T>
ACTIVATIONS_CPU_WIDE_LOOP double backward_sum(int64_t n, const T* g, const T* y) {
  using Partial = compute_t<T>;  // float, or double for float64
  Partial sum = 0;
  int64_t done = 0;
  if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
    float partial[kHalfStep] = {};
    for (; done + kHalfStep <= n; done += kHalfStep) {
      float gk[kHalfStep], yk[kHalfStep];
      load_halves(g + done, gk);
      load_halves(y + done, yk);
      for (int k = 0; k < kHalfStep; ++k) partial[k] += kLog ? gk[k] : gk[k] * yk[k];
    }
    typename Vector<float>::type lanes;  // kHalfStep floats
    memcpy(&lanes, partial, sizeof lanes);
    sum = fold_vector<float>(lanes, kAdd);
  }
  if constexpr (kInLanes<T>) {
    return reduce_in_lanes<T, true>(n, Partial(0), kAdd, [g, y](int64_t i, bool) {
      return kLog ? g[i] : g[i] * y[i];
    });
  }
#pragma omp simd reduction(+ : sum)
  for (int64_t i = done; i < n; ++i) sum += kLog ? load(g[i]) : load(g[i]) * load(y[i]);
  return sum;
}

// softmax: y (g - sum); log_softmax: g - exp(y) sum. The elementwise loop (cpu_loop_with): float16 kHalfStep at a
// time.
template <bool kLog, class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void backward_output(int64_t n, const T* g, const T* y, C sum, T* gi) {
  cpu_loop_with<-1>(n, [sum](C gk, C yk) { return kLog ? gk - exp_of(yk) * sum : yk * (gk - sum); }, gi, g, y);
}

// Column-wise forms of the same passes, for a block of w columns of a slab: `steps` steps of n, step j of each
// operand at j * stride from its first. Walking the steps inside the loop function, not calling it once a step,
// took the softmax backward over dim 1 of 64 x 256 x 64 from 0.82x torch's to 1.11x in float32 and from 0.84x to
// 1.06x in float64 (one thread, alternating rounds): a step there is 64 columns, 4 vectors, and a call cost about
// 11 cycles (timed with blocks of 16 columns).
// A step's columns go through each_column and map_elements (cpu_kernels.cpp): float16 kHalfStep elements at a
// time through F16C (g++ vectorizes no float16 conversion), the other types element by element, vectorized. float16 used to be
// widened into float buffers for each pass and rounded out of one. Over dim 1 of 64 x 256 x 64, 2 threads,
// alternating, ms, before -> after (torch): softmax backward 0.138-0.140 -> 0.064 (0.105-0.111), log_softmax
// backward 0.222-0.225 -> 0.167-0.184 (0.185-0.186); softmax forward 0.200-0.205 -> 0.178-0.182 (0.245-0.279),
// log_softmax forward 0.216-0.222 -> 0.176-0.177 (0.195-0.219).

// op(i, v...) for each column i < w of one step, v... the operands' elements i in the compute type.
template <class Op, class... T, size_t... I>
ACTIVATIONS_CPU_WIDE_LOOP inline void each_column_of(int64_t w, Op& op, std::index_sequence<I...>, const T*... x) {
  int64_t i = 0;
  if constexpr (kF16c && (std::is_same_v<T, c10::Half> && ...)) {
    for (; i + kHalfStep <= w; i += kHalfStep) {
      float v[sizeof...(T)][kHalfStep];
      (load_halves(x + i, v[I]), ...);
      for (int k = 0; k < kHalfStep; ++k) op(i + k, v[I][k]...);
    }
  }
#pragma GCC ivdep
  for (; i < w; ++i) op(i, load(x[i])...);
}
template <class Op, class... T>
ACTIVATIONS_CPU_WIDE_LOOP inline void each_column(int64_t w, Op&& op, const T*... x) {
  each_column_of(w, op, std::index_sequence_for<T...>{}, x...);
}

template <class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void max_into(int64_t steps, int64_t stride, int64_t w, const T* x, C* max) {
  for (int64_t j = 0; j < steps; ++j, x += stride) {
    each_column(w, [max](int64_t i, C v) { max[i] = v > max[i] ? v : max[i]; }, x);
  }
}
template <class T, class Partial, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void sum_exp_into(int64_t steps, int64_t stride, int64_t w, const T* x, const C* max,
                                            Partial* sum) {
  for (int64_t j = 0; j < steps; ++j, x += stride) {
    each_column(w, [max, sum](int64_t i, C v) { sum[i] += exp_nonpositive_of(v - max[i]); }, x);
  }
}
// softmax's exponentials kept in e (steps w apart) beside their sum, and the output from them: see
// kKeptExponentials.
template <class T, class Partial, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void exp_into_and_sum(int64_t steps, int64_t stride, int64_t w, const T* x, const C* max,
                                                C* e, Partial* sum) {
  for (int64_t j = 0; j < steps; ++j, x += stride, e += w) {
    each_column(w, [max, e, sum](int64_t i, C v) {
      e[i] = exp_nonpositive_of(v - max[i]);
      sum[i] += e[i];
    }, x);
  }
}
template <class T, class C>
ACTIVATIONS_CPU_WIDE_LOOP void scale_columns(int64_t steps, int64_t stride, int64_t w, const C* e, const C* total,
                                             T* y) {
  for (int64_t j = 0; j < steps; ++j, e += w, y += stride) {
    map_elements(w, y, [e, total](int64_t i) { return e[i] * total[i]; });
  }
}
template <bool kLog, class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void softmax_output_columns(int64_t steps, int64_t stride, int64_t w, const T* x,
                                                      const C* max, const C* total, T* y) {
  for (int64_t j = 0; j < steps; ++j, x += stride, y += stride) {
    map_elements(w, y, [max, total](int64_t i, C v) {
      return kLog ? (v - max[i]) - total[i] : exp_nonpositive_of(v - max[i]) * total[i];
    }, x);
  }
}
template <bool kLog, class T, class Partial>
ACTIVATIONS_CPU_WIDE_LOOP void backward_sum_into(int64_t steps, int64_t stride, int64_t w, const T* g, const T* y,
                                                 Partial* sum) {
  using C = compute_t<T>;
  for (int64_t j = 0; j < steps; ++j, g += stride, y += stride) {
    each_column(w, [sum](int64_t i, C gk, C yk) { sum[i] += kLog ? gk : gk * yk; }, g, y);
  }
}
template <bool kLog, class T, class C = compute_t<T>>
ACTIVATIONS_CPU_WIDE_LOOP void backward_output_columns(int64_t steps, int64_t stride, int64_t w, const T* g,
                                                       const T* y, const C* sum, T* gi) {
  for (int64_t j = 0; j < steps; ++j, g += stride, y += stride, gi += stride) {
    map_elements(w, gi, [sum](int64_t i, C gk, C yk) { return kLog ? gk - exp_of(yk) * sum[i] : yk * (gk - sum[i]); },
                 g, y);
  }
}

// Rows of up to kRowBlockElements elements past the register rows go through the forward's passes
// kRowBlockElements / n at a time (at most kRowBlock; softmax_row_block), and short 16-bit rows are widened so, a
// block at a time (softmax_widened_rows).
constexpr int64_t kRowBlockElements = 2048, kRowBlock = 128;

// Calls fn(first, count) over [0, n) in runs of kSoftmaxBlock elements.
template <class Fn>
void for_runs(int64_t n, Fn&& fn) {
  for (int64_t first = 0; first < n; first += kSoftmaxBlock) fn(first, std::min(kSoftmaxBlock, n - first));
}

// Rows of T (float, double or bfloat16, read and written in place by the loops) into y, a block of `rows` rows of
// n at a time (see kRowBlock); `exponentials`, rows x n floats, holds softmax's exponentials of bfloat16 rows
// (float and double keep them in y). y may be x. float16 rows: softmax_half_row. Each row's max and sum, then the
// block's totals (log_softmax's log(sum), softmax's 1 / sum) in one loop, then each row's output: the totals'
// divisions and logarithms vectorize across the rows, where a row at a time took one libm log (about 14 ns) or one
// division each, and the passes are inlined into one function (flatten), where each was a call. One thread, rows
// in cache, torch/ours (short_rows_min_ab.log): float32 rows of 16 softmax 0.70x -> 0.89x, log_softmax 0.45-0.47x
// -> 0.67-0.69x; of 32 0.81x -> 0.97-1.07x and 0.55-0.57x -> 0.80-0.88x; of 1024 0.84-0.88x -> 0.94-0.98x and
// 0.91-0.99x -> 0.91-0.95x. (Rows of 16-128 floats went on to the register rows, faster again.)
template <bool kLog, class T>
ACTIVATIONS_CPU_WIDE_LOOP void softmax_row_block(int64_t rows, int64_t n, const T* x, T* y, float* exponentials) {
  using C = compute_t<T>;
  using Partial = partial_sum_t<T>;
  alignas(64) C max[kRowBlock], total[kRowBlock];
  alignas(64) Sum<C> sum[kRowBlock];
  const auto e_of = [&](int64_t r) {
    if constexpr (std::is_same_v<T, C>) {
      return y + r * n;
    } else {
      return exponentials + r * n;
    }
  };
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    C m = -std::numeric_limits<C>::infinity();
    for_runs(n, [&](int64_t first, int64_t count) { m = max_of(count, row + first, m); });
    Sum<C> s = 0;
    if constexpr (kLog) {
      for_runs(n, [&](int64_t first, int64_t count) { s += sum_exp<T, Partial>(count, row + first, m); });
    } else {
      C* e = e_of(r);
      for_runs(n, [&](int64_t first, int64_t count) {
        s += exp_and_sum<T, Partial>(count, row + first, m, e + first);
      });
    }
    max[r] = m;
    sum[r] = s;
  }
  // log(sum) as log1p(sum - 1), fdlibm's (within 0.8 ulp; activations.cuh), which vectorizes where libm's log is a
  // call: sum - 1 is exact, the sum being at least 1 (its max's term), or NaN. (In the scalar code of the column
  // passes it would call libm's fma: log_of_sum stays libm's log there.)
#pragma omp simd
  for (int64_t r = 0; r < rows; ++r) {
    total[r] = static_cast<C>(kLog ? log1p_of(static_cast<double>(sum[r]) - 1.0) : 1 / sum[r]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (kLog) {
      log_softmax_output(n, x + r * n, max[r], total[r], y + r * n);
    } else {
      scale(n, e_of(r), total[r], y + r * n);
    }
  }
}

// The backward of one row of T (any storage type) into gi, which may be g.
template <bool kLog, class T>
void softmax_backward_row(int64_t n, const T* g, const T* y, T* gi) {
  Sum<compute_t<T>> sum = 0;
  for_runs(n, [&](int64_t first, int64_t count) { sum += backward_sum<kLog>(count, g + first, y + first); });
  backward_output<kLog>(n, g, y, static_cast<compute_t<T>>(sum), gi);
}

// A float16 row: each pass widens a run of kSoftmaxBlock elements at a time into `run` (F16C: g++ vectorizes no
// float16 conversion inside a loop), which stays in L1, and runs softmax_row_block's float loops over it, in the
// same runs, so the results are softmax_row_block's of the widened row to the bit, but for log_softmax's log(sum):
// libm's log here, log1p(sum - 1) there, each within an ulp of double. softmax keeps its exponentials (n floats)
// in `exponentials`, and the output is narrowed a run at a time. Widened whole into a float row first (and
// rounded out of it after), the passes moved 32 bytes an element where they move 14 (2-core Ice Lake Xeon,
// tools/cpu_softmax_min.py, the trees in turn, two rounds, torch/ours: at 64 x 50257 softmax 0.86-0.87x ->
// 1.10-1.12x, log_softmax 0.84-0.87x -> 0.97x; at 4096 x 1024 softmax 0.93-1.01x -> 1.05-1.12x). The backward's
// loops convert float16 8 or 16 elements at a time themselves (backward_sum, backward_output): widened whole, its
// rows of 50257 took three row-sized float buffers, more than the L2 holds, and ran at 0.38-0.45x torch's.
template <bool kLog>
void softmax_half_row(int64_t n, const c10::Half* x, c10::Half* y, float* exponentials) {
  alignas(64) float run[kSoftmaxBlock];
  const auto widened = [&](int64_t first, int64_t count) {
    widen(count, x + first, run);
    return run;
  };
  float max = -std::numeric_limits<float>::infinity();
  for_runs(n, [&](int64_t first, int64_t count) { max = max_of(count, widened(first, count), max); });
  Sum<float> sum = 0;
  if constexpr (kLog) {
    for_runs(n, [&](int64_t first, int64_t count) { sum += sum_exp<float, float>(count, widened(first, count), max); });
    const float log_sum = static_cast<float>(log_of_sum(sum));
    for_runs(n, [&](int64_t first, int64_t count) {
      log_softmax_output(count, widened(first, count), max, log_sum, run);
      narrow(count, run, y + first);
    });
  } else {
    for_runs(n, [&](int64_t first, int64_t count) {
      sum += exp_and_sum<float, float>(count, widened(first, count), max, exponentials + first);
    });
    const float factor = static_cast<float>(1 / sum);
    for_runs(n, [&](int64_t first, int64_t count) {
      scale(count, exponentials + first, factor, run);
      narrow(count, run, y + first);
    });
  }
}

// float16 and bfloat16 rows of at most kWidenedRow elements past the register rows (65-128 where the vectors are
// 256 bits; none with AVX-512, whose register rows reach 128) in blocks as the float rows,
// widened into a float buffer (in L1), taken through the float rows' passes there, and narrowed: the in-place
// bfloat16 loops (omp simd sums, their lanes added one after another) and a float16 row's runs cost more a row.
// 2-core Ice Lake Xeon, one thread, 2^18 elements, the least of 300 calls, torch/ours, two runs of each tree in
// turn (results/cpu-icelake-2026-11-28/short_rows_min_ab.log), with the float rows' blocks (softmax_row_block):
// rows of 32, bfloat16 softmax forward 0.55-0.65x -> 1.14-1.15x, log_softmax 0.47-0.80x -> 0.92-0.94x, softmax
// backward 0.38-0.39x -> 0.59-0.62x; float16 forward 0.74x -> 1.14-1.16x. Rows of 256 and longer ran slower so
// (bfloat16 at 512 forward 1.06-1.14x -> 0.95-1.04x, backward at 1024 0.91x -> 0.74-0.76x), and float16's
// backward (8 or 16 elements at a time through F16C already) no faster: float16 backwards keep their rows.
constexpr int64_t kWidenedRow = 128;
template <bool kLog, class S>
void softmax_widened_rows(int64_t rows, int64_t n, const S* x, S* y) {
  const int64_t block = std::clamp<int64_t>(kRowBlockElements / n, 1, kRowBlock);
  parallel(rows, std::max<int64_t>(1, kCpuGrain / n), [=](int64_t begin, int64_t end) {
    alignas(64) float widened[kRowBlockElements];
    for (int64_t r = begin; r < end; r += block) {
      const int64_t count = std::min(block, end - r);
      widen(count * n, x + r * n, widened);
      softmax_row_block<kLog, float>(count, n, widened, widened, nullptr);
      narrow(count * n, widened, y + r * n);
    }
  });
}

template <bool kLog, class S>
void softmax_backward_widened_rows(int64_t rows, int64_t n, const S* g, const S* y, S* gi) {
  const int64_t block = std::clamp<int64_t>(kRowBlockElements / n, 1, kRowBlock);
  parallel(rows, std::max<int64_t>(1, kCpuGrain / n), [=](int64_t begin, int64_t end) {
    alignas(64) float g_widened[kRowBlockElements], y_widened[kRowBlockElements];
    for (int64_t r = begin; r < end; r += block) {
      const int64_t count = std::min(block, end - r);
      widen(count * n, g + r * n, g_widened);
      widen(count * n, y + r * n, y_widened);
      for (int64_t k = 0; k < count * n; k += n) {
        softmax_backward_row<kLog, float>(n, g_widened + k, y_widened + k, g_widened + k);
      }
      narrow(count * n, g_widened, gi + r * n);
    }
  });
}

// Rows of one vector of floats up to kRegisterVectors of them (RegisterRow), a row at a time in registers: the row
// loaded whole as vectors of the compute type, its max and sum combined across the vectors and folded in their
// lanes, its output computed from the registers and stored, so that y may be x and gi may be g. Sums in float
// lanes: a lane adds at most kRegisterVectors terms before the fold's log2(kLanes) additions, at most 13 roundings
// of a sum of n <= 128, inside the forwards' and backward's bounds of (8 + sqrt(n)) ulp. Where a row's loops each
// took a call, a reduction over one or two vectors of lanes in double (float rows) or by omp simd (bfloat16), a
// tail and a loop for the output, these rows ran at 0.44-0.97x torch's. One thread, 2^18 elements, the least of
// 300 calls, the trees in turn, two rounds, torch/ours (results/cpu-icelake-2026-11-28/register_rows_ab.log),
// rows of 16-128: float32 forwards 0.67-1.09x -> 0.99-2.09x, backwards 0.42-1.06x -> 0.99-1.98x; bfloat16
// forwards 0.80-9.62x -> 1.12-17.4x, backwards 0.55-4.25x -> 0.93-23.3x; float16 forwards 0.87-7.51x ->
// 1.20-16.2x, backwards 0.30-6.42x -> 1.26-30.1x.
constexpr int kRegisterVectors = 8;
template <class T>
constexpr int kLanesOf = kVectorBytes / sizeof(compute_t<T>);

// kLanesOf<T> elements at `at` in the compute type, as one vector; and back, rounded to T. bfloat16 by the bit
// arithmetic of load() and store() on whole vectors (g++ left the loops over a vector's lanes scalar), 16 bits
// widened to 32 and narrowed back by one instruction each where the vectors are 512 bits (vpmovzxwd, vpmovdw: g++
// split the 512-bit conversions into 256-bit halves).
typedef uint16_t BFloat16Lanes __attribute__((vector_size(kVectorBytes / 2)));
typedef uint32_t BitLanes __attribute__((vector_size(kVectorBytes)));
#ifdef ACTIVATIONS_CPU_AVX512
typedef short Short16 __attribute__((vector_size(32)));
typedef int Int16 __attribute__((vector_size(64)));
ACTIVATIONS_CPU_WIDE_LOOP inline BitLanes widen_bits(BFloat16Lanes h) {
  return (BitLanes)__builtin_ia32_pmovzxwd512_mask((Short16)h, Int16{}, 0xffff);
}
ACTIVATIONS_CPU_WIDE_LOOP inline BFloat16Lanes narrow_bits(BitLanes bits) {
  return (BFloat16Lanes)__builtin_ia32_pmovdw512_mask((Int16)bits, Short16{}, 0xffff);
}
#else
ACTIVATIONS_CPU_WIDE_LOOP inline BitLanes widen_bits(BFloat16Lanes h) { return __builtin_convertvector(h, BitLanes); }
ACTIVATIONS_CPU_WIDE_LOOP inline BFloat16Lanes narrow_bits(BitLanes bits) {
  return __builtin_convertvector(bits, BFloat16Lanes);
}
#endif
// A vector of floats rounded to bfloat16 as store(), each result in its lane's high half (NaN gives 0x7fc0).
template <class V>
ACTIVATIONS_CPU_WIDE_LOOP inline BitLanes rounded_to_high_half(V v) {
  return v != v ? BitLanes{} + 0x7fc00000u : bfloat16_rounded_in_high_half((BitLanes)v);
}
template <class T, class V = typename Vector<compute_t<T>>::type>
ACTIVATIONS_CPU_WIDE_LOOP inline V load_vector(const T* at) {
  alignas(kVectorBytes) compute_t<T> lanes[kLanesOf<T>];
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    BFloat16Lanes h;
    memcpy(&h, at, sizeof h);
    const BitLanes bits = widen_bits(h) << 16;
    memcpy(lanes, &bits, sizeof bits);
  } else if constexpr (kF16c && std::is_same_v<T, c10::Half> && kHalfStep == kLanesOf<T>) {
    load_halves(at, lanes);
  } else {
    for (int k = 0; k < kLanesOf<T>; ++k) lanes[k] = load(at[k]);
  }
  V v;
  memcpy(&v, lanes, sizeof v);
  return v;
}
template <class T, class V = typename Vector<compute_t<T>>::type>
ACTIVATIONS_CPU_WIDE_LOOP inline void store_vector(V v, T* at) {
  alignas(kVectorBytes) compute_t<T> lanes[kLanesOf<T>];
  memcpy(lanes, &v, sizeof v);
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const BFloat16Lanes h = narrow_bits(rounded_to_high_half(v) >> 16);
    memcpy(at, &h, sizeof h);
  } else if constexpr (kF16c && std::is_same_v<T, c10::Half> && kHalfStep == kLanesOf<T>) {
    store_halves(lanes, at);
  } else {
    for (int k = 0; k < kLanesOf<T>; ++k) at[k] = store<T>(lanes[k]);
  }
}

// bfloat16 in pairs: kLanes 32-bit lanes hold 2 kLanes elements, element 2k in lane k's low half and 2k + 1 in
// its high half, so that each half widens by one instruction (a shift, a mask) and the two halves, rounded, merge by
// two (a shift and a masked merge), where load_vector and store_vector widen and narrow 16 elements by a shuffle
// each (vpmovzxwd, vpmovdw: the shuffle port's, beside a shift). For sums, and for outputs stored where they were
// read, in which the order of the elements within a pair does not matter.
template <class V>
struct BFloat16Pairs {
  V even, odd;
};
template <class V>
ACTIVATIONS_CPU_WIDE_LOOP inline BFloat16Pairs<V> load_pairs(const c10::BFloat16* at) {
  BitLanes bits;
  memcpy(&bits, at, sizeof bits);
  return {(V)(bits << 16), (V)(bits & 0xffff0000u)};
}
template <class V>
ACTIVATIONS_CPU_WIDE_LOOP inline void store_pairs(V even, V odd, c10::BFloat16* at) {
  const BitLanes bits = (rounded_to_high_half(odd) & 0xffff0000u) | (rounded_to_high_half(even) >> 16);
  memcpy(at, &bits, sizeof bits);
}

// fn(std::integral_constant<int, vectors>) for the fewest of 1, 2, 3, 4, 6 or kRegisterVectors vectors of S's
// compute type that hold n elements (see RegisterRow).
template <class S, class Fn>
void with_vector_count(int64_t n, Fn&& fn) {
  switch ((n + kLanesOf<S> - 1) / kLanesOf<S>) {
    case 1: return fn(std::integral_constant<int, 1>{});
    case 2: return fn(std::integral_constant<int, 2>{});
    case 3: return fn(std::integral_constant<int, 3>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    case 5:
    case 6: return fn(std::integral_constant<int, 6>{});
    default: return fn(std::integral_constant<int, kRegisterVectors>{});
  }
}

// exp of each lane of kVectors vectors, in place (exp_nonpositive_of where every lane is <= 0 or NaN, the
// forward's x - max): one vectorized loop over their lanes, so that a function holds the exponential's code once,
// not once a vector (compile time: see RegisterRow).
template <int kVectors, bool kNonpositive, class V, class C = std::remove_reference_t<decltype(V{}[0])>>
ACTIVATIONS_CPU_WIDE_LOOP inline void exp_of_lanes(V* v) {
  C* lanes = reinterpret_cast<C*>(v);  // g++'s vector types may alias their element type
#pragma omp simd
  for (int k = 0; k < kVectors * kVectorBytes / int(sizeof(C)); ++k) {
    lanes[k] = kNonpositive ? exp_nonpositive_of(lanes[k]) : exp_of(lanes[k]);
  }
}

// v's lanes from `first` on, those before it 0: a vector whose first lanes repeat elements counted already.
template <class V, class C = std::remove_reference_t<decltype(V{}[0])>>
ACTIVATIONS_CPU_WIDE_LOOP inline V lanes_from(int64_t first, V v) {
  typename Vector<C>::index_type lane;
  for (int k = 0; k < kVectorBytes / int(sizeof(C)); ++k) lane[k] = k;
  return lane >= std::remove_reference_t<decltype(lane[0])>(first) ? v : V{};
}

// A row of n elements of T, kLanes <= n <= kVectors kLanes, as kVectors vectors of the compute type: vector v holds
// elements [v kLanes, (v + 1) kLanes), or the row's last kLanes where that would pass its end, so that the last
// vectors may repeat elements of the ones before (a row of 72 floats in 6 vectors of 16: 0-15, ..., 48-63, 56-71,
// 56-71). The sum counts each element once; the output is stored from every vector, repeated elements twice, the
// same values. Vector counts of 1, 2, 3, 4, 6 and 8 only (with_vector_count), and none for float64: each is a copy
// of the code, and all eight counts for the four types, the exponentials unrolled, took cpu_kernels.cpp's compile
// from 8-9 s to 15-16 s.
template <int kVectors, class T>
struct RegisterRow {
  using C = compute_t<T>;
  using V = typename Vector<C>::type;
  static constexpr int kLanes = kLanesOf<T>;
  int64_t last;  // the row's last vector's first element

  ACTIVATIONS_CPU_WIDE_LOOP explicit RegisterRow(int64_t n) : last(n - kLanes) {}
  ACTIVATIONS_CPU_WIDE_LOOP int64_t first(int v) const { return std::min<int64_t>(v * kLanes, last); }
  ACTIVATIONS_CPU_WIDE_LOOP void load(const T* row, V* v) const {
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) v[k] = load_vector(row + first(k));
  }
  ACTIVATIONS_CPU_WIDE_LOOP void store(const V* v, T* row) const {
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) store_vector(v[k], row + first(k));
  }
  // The sum of the row's terms: vector v's lanes from v kLanes - first(v) on (those not in the vectors before).
  ACTIVATIONS_CPU_WIDE_LOOP C sum(const V* terms) const {
    V sum = terms[0];
#pragma GCC unroll kRegisterVectors
    for (int k = 1; k < kVectors; ++k) sum += lanes_from(k * kLanes - first(k), terms[k]);
    return fold_vector<C>(sum, kAdd);
  }
  // The max, NaN passed over (a repeated lane counts twice, which leaves a max unchanged).
  ACTIVATIONS_CPU_WIDE_LOOP C max(const V* x) const {
    V max = V{} - std::numeric_limits<C>::infinity();
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) max = kMax(max, x[k]);
    return fold_vector<C>(max, kMax);
  }
};

// Rows of kVectors vectors (see RegisterRow) into y, which may be x. softmax a row at a time: its exponentials
// stay in registers, times 1 / sum. log_softmax a block of kLogBlock rows at a time: each row's max and sum, then
// the block's log(sum) in one vectorized loop (log1p(sum - 1), sum - 1 exact: see softmax_row_block; a scalar
// log1p a row took the float32 rows of 16 from 0.69x torch's to 0.47-0.56x), then each row's output from x again.
constexpr int kLogBlock = 16;
template <bool kLog, int kVectors, class S>
ACTIVATIONS_CPU_WIDE_LOOP void softmax_register_rows(int64_t rows, int64_t n, const S* x, S* y) {
  using Row = RegisterRow<kVectors, S>;
  using C = typename Row::C;
  using V = typename Row::V;
  const Row row(n);
  V v[kVectors], e[kVectors];
  const auto max_and_sum = [&](const S* at, C& max, C& sum) {
    row.load(at, v);
    max = row.max(v);
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) e[k] = v[k] - max;
    exp_of_lanes<kVectors, true>(e);
    sum = row.sum(e);
  };
  if constexpr (!kLog) {
    for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
      C max, sum;
      max_and_sum(x, max, sum);
      const C factor = C(1) / sum;
#pragma GCC unroll kRegisterVectors
      for (int k = 0; k < kVectors; ++k) e[k] *= factor;
      row.store(e, y);
    }
  } else {
    for (int64_t first = 0; first < rows; first += kLogBlock) {
      const int64_t count = std::min<int64_t>(kLogBlock, rows - first);
      alignas(64) C max[kLogBlock], log_sum[kLogBlock];
      for (int r = 0; r < kLogBlock; ++r) log_sum[r] = 1;
      for (int r = 0; r < count; ++r) max_and_sum(x + (first + r) * n, max[r], log_sum[r]);
#pragma omp simd
      for (int r = 0; r < kLogBlock; ++r) log_sum[r] = log1p_of(log_sum[r] - C(1));
      for (int r = 0; r < count; ++r) {
        row.load(x + (first + r) * n, v);
#pragma GCC unroll kRegisterVectors
        for (int k = 0; k < kVectors; ++k) v[k] = (v[k] - max[r]) - log_sum[r];
        row.store(v, y + (first + r) * n);
      }
    }
  }
}

// The backward of rows of kVectors vectors (see RegisterRow) into gi, which may be g.
template <bool kLog, int kVectors, class S>
ACTIVATIONS_CPU_WIDE_LOOP void softmax_backward_register_rows(int64_t rows, int64_t n, const S* g, const S* y,
                                                              S* gi) {
  using Row = RegisterRow<kVectors, S>;
  using C = typename Row::C;
  using V = typename Row::V;
  const Row row(n);
  for (int64_t r = 0; r < rows; ++r, g += n, y += n, gi += n) {
    V gv[kVectors], yv[kVectors], terms[kVectors];
    row.load(g, gv);
    row.load(y, yv);
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) terms[k] = kLog ? gv[k] : gv[k] * yv[k];
    const C sum = row.sum(terms);
    if constexpr (kLog) exp_of_lanes<kVectors, false>(yv);  // g - exp(y) sum
#pragma GCC unroll kRegisterVectors
    for (int k = 0; k < kVectors; ++k) gv[k] = kLog ? gv[k] - yv[k] * sum : yv[k] * (gv[k] - sum);
    row.store(gv, gi);
  }
}

// softmax's backward over one 16-bit row past the register rows, in vectors of floats as those (load_vector,
// store_vector): the sum over runs of kSoftmaxBlock elements in kAccumulators vectors of float lanes each, the runs'
// sums added in double; the row's last kLanes elements as a last vector, whose lanes that the vectors before hold
// are left out of the sum, and whose output is computed before any is stored (gi may be g). Against the row loops
// (backward_sum's omp simd sum for bfloat16, float16's 16 partial sums in an array), one thread, 2^18 elements, the
// least of 300 calls, the trees in turn, three rounds, torch/ours (results/cpu-icelake-2026-11-28/
// vector_rows_backward_ab.log): bfloat16 at 129-256 0.57-0.73x -> 0.80-0.98x, at 512-2048 0.81-0.95x -> 0.87-0.99x;
// float16 at 129-256 0.58-0.80x -> 0.83-1.03x, at 512-2048 about even. With the accumulators kept in registers
// (softmax_backward_unrolled_ab.log): bfloat16 at 1024 0.87-0.89x -> 0.98-1.00x, float16 0.94-0.95x -> 1.14x; and
// rows past 2048 taken here too, which the row loops took before (softmax_backward_long_vector_rows_ab.log):
// bfloat16 at 8192 0.85-0.87x -> 1.01-1.02x, at 50257 0.93-0.94x -> 1.10-1.12x, float16 0.88-1.13x -> 1.04-1.23x.
// bfloat16 in pairs (load_pairs, store_pairs; softmax_backward_bfloat16_pairs_ab.log): at 1024 0.99-1.01x ->
// 1.24-1.28x, at 256 0.87-0.90x -> 1.02-1.07x, at 50257 1.06-1.12x -> 1.17-1.18x.
// float32's (softmax_backward_float32_vector_rows_ab.log: 0.94-1.09x -> 0.98-1.14x, inside the noise) keeps its
// double sums, and log_softmax's backward its row loops (slower here: float32 at 200-512 1.00-1.24x -> 0.89-1.09x,
// vector_rows_backward_all_ab.log, with the accumulators in memory).
template <class S>
ACTIVATIONS_CPU_WIDE_LOOP void softmax_backward_vector_row(int64_t n, const S* g, const S* y, S* gi) {
  using C = compute_t<S>;
  using V = typename Vector<C>::type;
  constexpr int kLanes = kLanesOf<S>, kAccumulators = 4;
  const auto term = [&](int64_t at) { return load_vector(g + at) * load_vector(y + at); };
  const int64_t whole = n / kLanes * kLanes;  // elements in whole vectors
  double sum = 0;
  for (int64_t first = 0; first < whole; first += kSoftmaxBlock) {
    const int64_t end = std::min(first + kSoftmaxBlock, whole);
    V partial[kAccumulators] = {};
    int64_t i = first;
    for (; i + kAccumulators * kLanes <= end; i += kAccumulators * kLanes) {
      if constexpr (std::is_same_v<S, c10::BFloat16>) {
        const BFloat16Pairs<V> g0 = load_pairs<V>(g + i), y0 = load_pairs<V>(y + i);
        const BFloat16Pairs<V> g1 = load_pairs<V>(g + i + 2 * kLanes), y1 = load_pairs<V>(y + i + 2 * kLanes);
        partial[0] += g0.even * y0.even;
        partial[1] += g0.odd * y0.odd;
        partial[2] += g1.even * y1.even;
        partial[3] += g1.odd * y1.odd;
      } else {
        // Unrolled, so that the partial sums stay in registers (at -O1 g++ kept them in memory, a load and a store
        // a vector).
#pragma GCC unroll 4
        for (int k = 0; k < kAccumulators; ++k) partial[k] += term(i + k * kLanes);
      }
    }
    for (; i < end; i += kLanes) partial[0] += term(i);
#pragma GCC unroll 4
    for (int k = 1; k < kAccumulators; ++k) partial[0] += partial[k];
    sum += fold_vector<C>(partial[0], kAdd);
  }
  const int64_t last = n - kLanes;
  sum += fold_vector<C>(lanes_from(whole - last, term(last)), kAdd);
  const C total = static_cast<C>(sum);
  const auto output = [&](int64_t at) { return load_vector(y + at) * (load_vector(g + at) - total); };
  const V last_output = output(last);
  int64_t i = 0;
  if constexpr (std::is_same_v<S, c10::BFloat16>) {
    for (; i + 2 * kLanes <= whole; i += 2 * kLanes) {
      const BFloat16Pairs<V> gp = load_pairs<V>(g + i), yp = load_pairs<V>(y + i);
      store_pairs(yp.even * (gp.even - total), yp.odd * (gp.odd - total), gi + i);
    }
  }
  for (; i < whole; i += kLanes) store_vector(output(i), gi + i);
  store_vector(last_output, gi + last);
}

// Whether rows of n go through the register rows: float, float16 and bfloat16 rows (kRegisterRows) of one vector of
// floats up to kRegisterVectors. (float64 rows keep the row loops, faster than torch's there already: its copies
// of the register rows would cost compile time.)
template <class S>
constexpr bool kRegisterRows = !std::is_same_v<S, double>;
template <class S>
bool in_registers(int64_t n) {
  return kRegisterRows<S> && n >= kLanesOf<S> && n <= kRegisterVectors * kLanesOf<S>;
}

template <bool kLog, class S>
void softmax_rows(int64_t rows, int64_t n, const S* x, S* y) {
  if constexpr (kRegisterRows<S>) {
    if (in_registers<S>(n)) {
      return parallel(rows, std::max<int64_t>(1, kCpuGrain / n), [=](int64_t begin, int64_t end) {
        with_vector_count<S>(n, [&](auto vectors) {
          softmax_register_rows<kLog, vectors()>(end - begin, n, x + begin * n, y + begin * n);
        });
      });
    }
  }
  if constexpr (sizeof(S) == 2) {
    if (n <= kWidenedRow) return softmax_widened_rows<kLog>(rows, n, x, y);
  }
  const int64_t block = std::clamp<int64_t>(kRowBlockElements / n, 1, kRowBlock);
  parallel(rows, std::max<int64_t>(1, kCpuGrain / n), [=](int64_t begin, int64_t end) {
    std::vector<float> exponentials(std::is_same_v<S, compute_t<S>> ? 0 : block * n);  // the 16-bit types'
    for (int64_t r = begin; r < end; r += block) {
      if constexpr (std::is_same_v<S, c10::Half>) {
        for (int64_t k = r; k < std::min(r + block, end); ++k) {
          softmax_half_row<kLog>(n, x + k * n, y + k * n, exponentials.data());
        }
      } else {
        softmax_row_block<kLog>(std::min(block, end - r), n, x + r * n, y + r * n, exponentials.data());
      }
    }
  });
}

template <bool kLog, class S>
void softmax_backward_rows(int64_t rows, int64_t n, const S* g, const S* y, S* gi) {
  if constexpr (std::is_same_v<S, c10::BFloat16>) {
    if (!in_registers<S>(n) && n <= kWidenedRow) return softmax_backward_widened_rows<kLog>(rows, n, g, y, gi);
  }
  parallel(rows, std::max<int64_t>(1, kCpuGrain / n), [=](int64_t begin, int64_t end) {
    if constexpr (kRegisterRows<S>) {
      if (in_registers<S>(n)) {
        const int64_t at = begin * n;
        return with_vector_count<S>(n, [&](auto vectors) {
          softmax_backward_register_rows<kLog, vectors()>(end - begin, n, g + at, y + at, gi + at);
        });
      }
    }
    // (The row loops are not instantiated for 16-bit softmax, which the vector rows take whole.)
    if constexpr (!kLog && sizeof(S) == 2) {
      for (int64_t r = begin; r < end; ++r) softmax_backward_vector_row(n, g + r * n, y + r * n, gi + r * n);
    } else {
      for (int64_t r = begin; r < end; ++r) softmax_backward_row<kLog>(n, g + r * n, y + r * n, gi + r * n);
    }
  });
}

// The sums of w columns over n steps: add(first, count) adds steps [first, first + count)'s terms to `partial`
// (see partial_sum_t), which goes into `total` (Sum) every kSoftmaxSteps steps.
template <class Total, class Partial, class Add>
void column_sums(int64_t n, int64_t w, Total* total, Partial* partial, Add&& add) {
  std::fill(total, total + w, Total(0));
  for (int64_t first = 0; first < n; first += kSoftmaxSteps) {
    std::fill(partial, partial + w, Partial(0));
    add(first, std::min(kSoftmaxSteps, n - first));
    for (int64_t i = 0; i < w; ++i) total[i] += partial[i];
  }
}

// body(offset, w) for every block of kSoftmaxColumns columns of every slab [n, inner] (one per outer index):
// offset is the block's first element, w its columns. Each (slab, block) is one unit of the parallel loop, so a
// single slab with many columns spreads over the threads too.
template <class Body>
void for_column_blocks(SoftmaxShape shape, const Body& body) {
  const int64_t blocks = (shape.inner + kSoftmaxColumns - 1) / kSoftmaxColumns;
  const int64_t grain = std::max<int64_t>(1, kCpuGrain / (shape.n * kSoftmaxColumns));
  parallel(shape.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t column = (unit % blocks) * kSoftmaxColumns;
      body((unit / blocks) * shape.n * shape.inner + column, std::min(kSoftmaxColumns, shape.inner - column));
    }
  });
}

// softmax's column forward keeps a block's exponentials (n x w of them, in the compute type) where they are at
// most kKeptExponentials, as the rows keep theirs, instead of taking exp again in the writing pass. Over dim 1 of
// 64 x 256 x 64, 2 threads, torch/ours: bfloat16 0.81x -> 1.41x, float16 0.78x -> 1.22x, float32 1.21x -> 1.57x,
// float64 1.19x -> 1.64x.
constexpr int64_t kKeptExponentials = 1 << 16;

// The forward over one block of a slab: w columns, n steps `stride` apart, from x into y (which may be x).
template <bool kLog, class S>
void softmax_column_block(int64_t n, int64_t stride, int64_t w, const S* x, S* y) {
  using C = compute_t<S>;
  alignas(64) C max[kSoftmaxColumns], total[kSoftmaxColumns];
  alignas(64) partial_sum_t<S> sum[kSoftmaxColumns];
  Sum<C> column_sum[kSoftmaxColumns];
  std::fill(max, max + w, -std::numeric_limits<C>::infinity());
  max_into(n, stride, w, x, max);
  const bool keep = !kLog && n * w <= kKeptExponentials;
  thread_local std::vector<C> kept;  // allocated once a thread, reused by its later blocks and calls
  if (keep && kept.size() < static_cast<size_t>(n * w)) kept.resize(static_cast<size_t>(n * w));
  column_sums(n, w, column_sum, sum, [&](int64_t first, int64_t count) {
    const S* in = x + first * stride;
    if (keep) {
      exp_into_and_sum(count, stride, w, in, max, kept.data() + first * w, sum);
    } else {
      sum_exp_into(count, stride, w, in, max, sum);
    }
  });
  for (int64_t i = 0; i < w; ++i) {  // log_softmax's log(sum), softmax's 1 / sum
    total[i] = static_cast<C>(kLog ? log_of_sum(column_sum[i]) : 1 / column_sum[i]);
  }
  if (keep) {
    scale_columns(n, stride, w, kept.data(), total, y);
  } else {
    softmax_output_columns<kLog>(n, stride, w, x, max, total, y);
  }
}

// The backward over one block of a slab, as softmax_column_block; gi may be g.
template <bool kLog, class S>
void softmax_backward_column_block(int64_t n, int64_t stride, int64_t w, const S* g, const S* y, S* gi) {
  using C = compute_t<S>;
  alignas(64) C total[kSoftmaxColumns];
  alignas(64) partial_sum_t<S> sum[kSoftmaxColumns];
  Sum<C> column_sum[kSoftmaxColumns];
  column_sums(n, w, column_sum, sum, [&](int64_t first, int64_t count) {
    backward_sum_into<kLog>(count, stride, w, g + first * stride, y + first * stride, sum);
  });
  for (int64_t i = 0; i < w; ++i) total[i] = static_cast<C>(column_sum[i]);
  backward_output_columns<kLog>(n, stride, w, g, y, total, gi);
}

template <bool kLog, class S>
void softmax_columns(SoftmaxShape shape, const S* x, S* y) {
  for_column_blocks(shape, [&](int64_t offset, int64_t w) {
    softmax_column_block<kLog>(shape.n, shape.inner, w, x + offset, y + offset);
  });
}

template <bool kLog, class S>
void softmax_backward_columns(SoftmaxShape shape, const S* g, const S* y, S* gi) {
  for_column_blocks(shape, [&](int64_t offset, int64_t w) {
    softmax_backward_column_block<kLog>(shape.n, shape.inner, w, g + offset, y + offset, gi + offset);
  });
}

// Rows shorter than kShortRow (shorter than a 512-bit vector of floats: no row fills one), kSoftmaxColumns rows at
// a time, transposed: the block is copied into a buffer of the compute type with row r's element j at j * w + r,
// the column passes above take it as w columns of n steps, their vectors running across the rows, and the result
// is copied back. The copies are scalar, but the row loops ran such rows one element at a time: on a 2-core Ice
// Lake Xeon, 2 threads, 2^21 elements, torch/ours, forward 0.45-1.42x -> 3.2-6.1x at rows of 4, 8 and 12, backward
// 0.63-2.08x -> 1.64-3.07x (results/cpu-icelake-2026-11-27/short_rows_ab.log). Rows of 16 and longer go through
// the register rows, which ran faster than transposed for the 16-bit types too (which were transposed up to 31:
// bfloat16 at 16-31, one thread, torch/ours, forwards 2.35-5.25x -> 3.26-15.7x, backwards 2.02-4.11x ->
// 7.50-21.0x; register_rows_ab.log).
constexpr int64_t kShortRow = 16;

template <class S, class C = compute_t<S>>
ACTIVATIONS_CPU_WIDE_LOOP void rows_to_columns(int64_t w, int64_t n, const S* x, C* t) {
  for (int64_t r = 0; r < w; ++r, x += n) {
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) t[j * w + r] = load(x[j]);
  }
}
template <class S, class C = compute_t<S>>
ACTIVATIONS_CPU_WIDE_LOOP void columns_to_rows(int64_t w, int64_t n, const C* t, S* y) {
  for (int64_t r = 0; r < w; ++r, y += n) {
#pragma GCC ivdep
    for (int64_t j = 0; j < n; ++j) y[j] = store<S>(t[j * w + r]);
  }
}

// body(first, count) for every block of up to kSoftmaxColumns rows of n, each a unit of the parallel loop.
template <class Body>
void for_row_blocks(int64_t rows, int64_t n, const Body& body) {
  const int64_t w = kSoftmaxColumns;
  parallel((rows + w - 1) / w, std::max<int64_t>(1, kCpuGrain / (n * w)), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) body(b * w, std::min(w, rows - b * w));
  });
}

template <bool kLog, class S>
void softmax_short_rows(int64_t rows, int64_t n, const S* x, S* y) {
  for_row_blocks(rows, n, [&](int64_t first, int64_t count) {
    thread_local std::vector<compute_t<S>> block;  // allocated once a thread, as softmax_column_block's
    block.resize(static_cast<size_t>(n * count));
    rows_to_columns(count, n, x + first * n, block.data());
    softmax_column_block<kLog>(n, count, count, block.data(), block.data());
    columns_to_rows(count, n, block.data(), y + first * n);
  });
}

template <bool kLog, class S>
void softmax_backward_short_rows(int64_t rows, int64_t n, const S* g, const S* y, S* gi) {
  for_row_blocks(rows, n, [&](int64_t first, int64_t count) {
    thread_local std::vector<compute_t<S>> g_block, y_block;
    g_block.resize(static_cast<size_t>(n * count));
    y_block.resize(static_cast<size_t>(n * count));
    rows_to_columns(count, n, g + first * n, g_block.data());
    rows_to_columns(count, n, y + first * n, y_block.data());
    softmax_backward_column_block<kLog>(n, count, count, g_block.data(), y_block.data(), g_block.data());
    columns_to_rows(count, n, g_block.data(), gi + first * n);
  });
}

}  // namespace

void cpu_softmax_forward(bool log, DType dtype, SoftmaxShape shape, const void* x, void* y) {
  with_scalar_type(dtype, [&](auto storage) {
    using S = decltype(storage);
    const auto* in = static_cast<const S*>(x);
    auto* out = static_cast<S*>(y);
    if (shape.inner == 1 && shape.n < kShortRow) {
      log ? softmax_short_rows<true>(shape.outer, shape.n, in, out)
          : softmax_short_rows<false>(shape.outer, shape.n, in, out);
    } else if (shape.inner == 1) {
      log ? softmax_rows<true>(shape.outer, shape.n, in, out) : softmax_rows<false>(shape.outer, shape.n, in, out);
    } else {
      log ? softmax_columns<true>(shape, in, out) : softmax_columns<false>(shape, in, out);
    }
  });
}

void cpu_softmax_backward(bool log, DType dtype, SoftmaxShape shape, const void* grad_out, const void* output,
                          void* grad_in) {
  with_scalar_type(dtype, [&](auto storage) {
    using S = decltype(storage);
    const auto* g = static_cast<const S*>(grad_out);
    const auto* y = static_cast<const S*>(output);
    auto* gi = static_cast<S*>(grad_in);
    if (shape.inner == 1 && shape.n < kShortRow) {
      log ? softmax_backward_short_rows<true>(shape.outer, shape.n, g, y, gi)
          : softmax_backward_short_rows<false>(shape.outer, shape.n, g, y, gi);
    } else if (shape.inner == 1) {
      log ? softmax_backward_rows<true>(shape.outer, shape.n, g, y, gi)
          : softmax_backward_rows<false>(shape.outer, shape.n, g, y, gi);
    } else {
      log ? softmax_backward_columns<true>(shape, g, y, gi) : softmax_backward_columns<false>(shape, g, y, gi);
    }
  });
}

}  // namespace activations
