// CPU kernels: the functors of activations.cuh over the same memory-order walk as the CUDA kernels, on torch's
// CPU threads (at::parallel_for), and softmax's CPU loops (softmax_cpu.cpp, included at the end). No torch
// headers beyond ATen/Parallel.h and the 16-bit types, so this unit compiles beside activations.cpp instead of
// after it.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include <algorithm>
#include <type_traits>
#include <utility>

#include "gelu_table_cpu.h"
#include "kernels.h"

namespace activations {
namespace {

template <class scalar_t>
using compute_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// The functor that `tag` (with_functor) names, for storage type scalar_t: computed in compute_t, and told when
// its results are rounded to float16 or bfloat16, so that it takes its 16-bit formulas (k16BitResult, as on the
// GPU, CudaKernels::For; those that pay on the CPU: see kCheap16BitMath), correctly rounded or one ulp off.
// One thread, torch/ours: bfloat16 leaky_relu forward 0.61-0.63x -> 0.98x, float16 0.61-0.66x -> 1.16-1.22x; elu
// forward 1.86-2.16x -> 3.14-3.41x; mish step 4.7-5.3x -> 6.1-6.8x.
template <class Tag, class scalar_t>
using CpuFunctor = typename Tag::template type<compute_t<scalar_t>, sizeof(scalar_t) == 2>;

constexpr int64_t kCpuGrain = 1 << 15;

// body(begin, end) over [0, n) on torch's CPU threads, through one at::parallel_for for all the loops of this
// file: its OpenMP region, thread bookkeeping and exception forwarding were instantiated and compiled once per
// loop (about 200 times), now once; a chunk costs one indirect call.
using ChunkFn = void (*)(const void* body, int64_t begin, int64_t end);

__attribute__((noinline)) void parallel_chunks(int64_t n, int64_t grain, ChunkFn fn, const void* body) {
  at::parallel_for(0, n, grain, [=](int64_t begin, int64_t end) { fn(body, begin, end); });
}

template <class Body>
void parallel(int64_t n, int64_t grain, const Body& body) {
  parallel_chunks(
      n, grain, [](const void* b, int64_t begin, int64_t end) { (*static_cast<const Body*>(b))(begin, end); },
      &body);
}

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

// The CPU loops are plain loops over dense memory with branch-free bodies (selects; the exp and expm1 of
// activations.cuh are inline), so g++ vectorizes them: -fno-trapping-math lets it evaluate both sides of a
// select. activations.py defines ACTIVATIONS_CPU_AVX2 on x86-64 machines where torch runs AVX2 kernels; then
// these loops, and only they, are compiled for AVX2 + FMA + F16C (ELU's float loop ran 3.5x faster than with the
// SSE2 baseline). `#pragma GCC ivdep`: `out` is either disjoint from the inputs or the very same memory (in
// place), never shifted, so no iteration depends on another; without it g++ would test for overlap at run time
// and run the in-place calls unvectorized.
// flatten: everything a loop calls is inlined into it. At -O1 g++ inlines only small functions by itself, and a
// larger one (GELU's normal(), sigmoid_two_u()) stayed a call, compiled without the loop's FMA target: its
// fmaf became calls into libm and the float32 GELU ran 80x slower than torch's.
// optimize("gcse"): the loops get -O2's global common subexpression elimination on top of the file's -O1, which
// hoists the op's constants out of the vector loop (at -O1 they are loaded again in each iteration, and spilled).
// optimize("no-thread-jumps"): without it g++ copies what follows a select (the division of hardsigmoid, the
// bfloat16 rounding of the store) into each of its sides, where the constant sides fold, and the vectorized loop
// then computes every copy and selects among them. Instructions of the loop body, before -> after: bfloat16
// hardsigmoid forward 71 -> 51 (16 elements), its flag loop 207 -> 147; bfloat16 ReLU forward 42 -> 37, flag loop
// 129 -> 92; of the 137 loops 39 got shorter (9075 -> 8772 instructions in all) and one longer (bfloat16 ELU
// forward, 156 -> 161). One thread, torch/ours: bfloat16 hardsigmoid forward 0.70-0.77x -> 0.90-0.96x, ReLU
// forward 0.81-0.87x -> 0.92x.
// vzeroupper where a loop returns: without it every return left the vector registers' upper halves dirty, and the
// SSE code that called the loop (ours and torch's) stalled on them: 60 ns a call, one call per softmax row and
// pass, so the float32 softmax over rows of 1024 ran at 0.81x torch's forward and 0.76x backward on one thread,
// 1.0-1.1x and 0.9x after; and stream_blocks, which calls a loop and stream_copy per KiB, ran the streamed ReLU
// and hardsigmoid forwards about 3x slower than the other mask rows. g++ 12 inserts it under
// optimize("expensive-optimizations") (-O1 has it off), g++ 13.3 did not (no function of the library had one):
// -mvzeroupper (activations.py, cpu_flags) asks for it whatever the version, and a test reads the disassembly.
// expensive-optimizations stays (the loops' code as measured); it also turns on g++'s contraction of a * b + c
// into fused multiply-adds, which -ffp-contract=off (activations.py) keeps off: every result of the CPU loops has
// the same bits as before (12 of 208 float64 and log_softmax results differed with contraction).
#ifdef ACTIVATIONS_CPU_AVX2
#define ACTIVATIONS_CPU_LOOP_FOR(isa) \
  __attribute__((target(isa), optimize("gcse", "no-thread-jumps", "expensive-optimizations"), flatten))
#define ACTIVATIONS_CPU_LOOP ACTIVATIONS_CPU_LOOP_FOR("avx2,fma,f16c")
#else
#define ACTIVATIONS_CPU_LOOP __attribute__((optimize("gcse", "no-thread-jumps"), flatten))
#endif

// The elementwise loop (cpu_loop_with), widen and narrow, and softmax's loops, where torch runs AVX-512 kernels
// (activations.py then defines ACTIVATIONS_CPU_AVX512), take 512-bit vectors: g++ prefers 256 bits unless told
// otherwise. On a 2-core AMD EPYC with AVX-512, the forwards of the ops with an exponential took half the time (2
// threads, 2^22 elements, torch/ours: float32 SiLU 0.47x -> 0.93x, sigmoid 0.49x -> 0.95x, GELU 0.55x -> 1.11x,
// bfloat16 SiLU 0.46x -> 1.01x, softplus 0.66x -> 1.24x), where 256-bit loops raced torch's 512-bit kernels. The
// mask backward loops stay at 256 bits: 512-bit vectors made the float16 LeakyReLU and hardsigmoid backwards 3.4x
// slower (0.29 -> 1.0 ms); on Zen 4 so do the memory-bound elementwise loops (memory_bound_loop, below). The forward
// with a mask (cpu_forward_mask_loop) takes 512 bits, its float16 16 elements a step (load_halves): forward with a
// mask, 2 threads, torch's forward/ours, bfloat16 LeakyReLU 0.98x -> 1.57x, hardsigmoid 0.85x -> 1.22x; float16
// LeakyReLU 1.04x -> 1.18x (with load8's 8 elements a step in 512-bit loops: 0.26x); at 256 bits its float32 and
// float64 steps read the same on Zen 4, within the rounds' spread
// (results/cpu-epyc-2026-12-07/mask_forward_width_ab.log).
#ifdef ACTIVATIONS_CPU_AVX512
#define ACTIVATIONS_CPU_WIDE_LOOP \
  ACTIVATIONS_CPU_LOOP_FOR("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")
#else
#define ACTIVATIONS_CPU_WIDE_LOOP ACTIVATIONS_CPU_LOOP
#endif

// Loads and stores: the storage type's value in the compute type, and the compute type's value rounded once to
// the storage type, inside the op's own loop: one pass over memory. bfloat16 is converted by bit arithmetic that
// g++ vectorizes (a shift on load; on store about 12 instructions per 8 elements). (These loops used to widen
// bfloat16 and float16 into float buffers a block at a time, map the buffers, and round them back: three passes
// whose conversion loops g++ left scalar, and the bfloat16 ReLU ran at 0.43x of torch's.)
inline float load(float v) { return v; }
inline double load(double v) { return v; }
inline float load(c10::BFloat16 v) { return float_from_bits(uint32_t(v.x) << 16); }
inline float load(c10::Half v) { return static_cast<float>(v); }

template <class scalar_t>
inline scalar_t store(compute_t<scalar_t> v) {
  return static_cast<scalar_t>(v);  // float, double; float16 without F16C (c10's bit arithmetic)
}
// A float's bits rounded to bfloat16's to nearest even, as c10: add 0x7fff plus the lowest bit kept (the bfloat16
// then in the high 16 bits), drop 16 bits (not for NaN). Bits: uint32_t, or a vector of them (softmax's
// rounded_to_high_half).
template <class Bits>
inline Bits bfloat16_rounded_in_high_half(Bits bits) {
  return bits + 0x7fffu + ((bits >> 16) & 1u);
}
template <class Bits>
inline Bits bfloat16_bits_rounded(Bits bits) {
  return bfloat16_rounded_in_high_half(bits) >> 16;
}
template <>
inline c10::BFloat16 store<c10::BFloat16>(float v) {
  // NaN gives 0x7fc0.
  const uint32_t bits = host_float::bits_of(v);
  const uint32_t rounded = bfloat16_bits_rounded(bits);
  return c10::BFloat16(static_cast<uint16_t>(v != v ? 0x7fc0u : rounded), c10::BFloat16::from_bits());
}

// bfloat16 storage for results that are bfloat16 values already: a forward that returns its input or a constant
// bfloat16 holds (constants_are in activations.cuh). Such a float's low 16 bits are zero, so rounding it to
// nearest even drops them and nothing else, NaN included: the store is a shift, without the rounding's additions
// and NaN select. bench.py's bfloat16 forwards (2 threads, 2^22 elements), torch/ours: ReLU 0.82x -> 1.39-1.50x,
// hardtanh 0.72x -> 1.00-1.02x, ReLU6 0.75x -> 1.12-1.13x.
struct ExactBFloat16 {
  uint16_t x;
};
inline bool bfloat16_holds(float v) { return (host_float::bits_of(v) & 0xffffu) == 0; }
template <>
inline ExactBFloat16 store<ExactBFloat16>(float v) {
  return ExactBFloat16{static_cast<uint16_t>(host_float::bits_of(v) >> 16)};
}

// float16: g++ vectorizes no float16 conversion with F16C, and c10's bit arithmetic takes about 4 times the
// instructions of bfloat16's. So where the loops are compiled for F16C, float16 goes 8 elements at a time: one
// F16C instruction converts the 8 into a float array, the op's loop over the array vectorizes into one pass of
// vector instructions, and one more instruction rounds the 8 results back (to nearest even, as c10). The
// builtins are those of immintrin.h's _mm256_cvtph_ps and _mm256_cvtps_ph, used directly: the header costs
// 0.6-0.9 s of compile time.
#ifdef ACTIVATIONS_CPU_AVX2
constexpr bool kF16c = true;
typedef short Half8 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));
ACTIVATIONS_CPU_LOOP inline void load8(const c10::Half* in, float* out) {
  Half8 h;
  memcpy(&h, in, sizeof h);
  const Float8 f = __builtin_ia32_vcvtph2ps256(h);
  memcpy(out, &f, sizeof f);
}
ACTIVATIONS_CPU_LOOP inline void store8(const float* in, c10::Half* out) {
  Float8 f;
  memcpy(&f, in, sizeof f);
  const Half8 h = __builtin_ia32_vcvtps2ph256(f, 0);  // 0: round to nearest even
  memcpy(out, &h, sizeof h);
}
// Bit k of the result: whether flags[k] has its top bit set (vmovmskps).
ACTIVATIONS_CPU_LOOP inline uint32_t mask8(const int32_t* flags) {
  Float8 f;
  memcpy(&f, flags, sizeof f);
  return static_cast<uint32_t>(__builtin_ia32_movmskps256(f));
}
#else
constexpr bool kF16c = false;
inline void load8(const c10::Half* in, float* out) {
  for (int k = 0; k < 8; ++k) out[k] = load(in[k]);
}
inline void store8(const float* in, c10::Half* out) {
  for (int k = 0; k < 8; ++k) out[k] = store<c10::Half>(in[k]);
}
inline uint32_t mask8(const int32_t* flags) {
  uint32_t bits = 0;
  for (int k = 0; k < 8; ++k) bits |= uint32_t(flags[k] < 0) << k;
  return bits;
}
#endif

// The wide loops' float16 step (kHalfStep) and its conversions, load_halves and store_halves: 16 elements where
// they are 512 bits (_mm512_cvtph_ps and _mm512_cvtps_ph's builtins), else load8 and store8's 8.
#ifdef ACTIVATIONS_CPU_AVX512
constexpr int kHalfStep = 16;
typedef short Half16 __attribute__((vector_size(32)));
typedef float Float16Lanes __attribute__((vector_size(64)));
ACTIVATIONS_CPU_WIDE_LOOP inline void load_halves(const c10::Half* in, float* out) {
  Half16 h;
  memcpy(&h, in, sizeof h);
  const Float16Lanes f = __builtin_ia32_vcvtph2ps512_mask(h, Float16Lanes{}, 0xffff, 4);  // 4: current rounding
  memcpy(out, &f, sizeof f);
}
ACTIVATIONS_CPU_WIDE_LOOP inline void store_halves(const float* in, c10::Half* out) {
  Float16Lanes f;
  memcpy(&f, in, sizeof f);
  const Half16 h = __builtin_ia32_vcvtps2ph512_mask(f, 0, Half16{}, 0xffff);  // 0: round to nearest even
  memcpy(out, &h, sizeof h);
}
#else
constexpr int kHalfStep = 8;
inline void load_halves(const c10::Half* in, float* out) { load8(in, out); }
inline void store_halves(const float* in, c10::Half* out) { store8(in, out); }
#endif

// bfloat16 rounding by instruction where the CPU has AVX512-BF16 (activations.py then defines
// ACTIVATIONS_CPU_AVX512_BF16): one vcvtne2ps2bf16 rounds 32 floats to nearest even, where store()'s bit arithmetic
// takes about 7 instructions for 16. The instruction flushes subnormal floats to zero and keeps a NaN's sign and
// payload (c10 writes 0x7fc0, as the other loops do), so a step that holds either (vfpclassps: classes 0x20
// subnormal, 0x01 and 0x80 quiet and signaling NaN) is rounded by store() instead.
// Written in asm: the builtin's name and types changed between g++ 12 and 13, and immintrin.h costs compile time.
#ifdef ACTIVATIONS_CPU_AVX512_BF16
constexpr bool kBFloat16ByInstruction = true;
ACTIVATIONS_CPU_WIDE_LOOP inline void store_bfloat16s(const float* in, c10::BFloat16* out) {
  Float16Lanes low, high;
  memcpy(&low, in, sizeof low);
  memcpy(&high, in + 16, sizeof high);
  Float16Lanes rounded;  // 32 bfloat16 values
  unsigned char subnormal_or_nan;
  asm("vfpclassps $0xa1, %[low], %%k1\n\t"
      "vfpclassps $0xa1, %[high], %%k2\n\t"
      "kortestw %%k1, %%k2\n\t"
      "setnz %[subnormal_or_nan]\n\t"
      "vcvtne2ps2bf16 %[low], %[high], %[rounded]"
      : [rounded] "=v"(rounded), [subnormal_or_nan] "=q"(subnormal_or_nan)
      : [low] "v"(low), [high] "v"(high)
      : "k1", "k2", "cc");
  if (subnormal_or_nan) {
    for (int k = 0; k < 32; ++k) out[k] = store<c10::BFloat16>(in[k]);
  } else {
    memcpy(out, &rounded, sizeof rounded);
  }
}
#else
constexpr bool kBFloat16ByInstruction = false;
inline void store_bfloat16s(const float* in, c10::BFloat16* out) {
  for (int k = 0; k < 32; ++k) out[k] = store<c10::BFloat16>(in[k]);
}
#endif

// out[i] = op(i, v...) rounded to Out for i < n, v... the inputs' elements i in the compute type: the elementwise
// loop (cpu_loop_with) and softmax's column loops. Where Out and the inputs are float16 and the loops have F16C,
// kHalfStep elements a step (see load8); bfloat16 results 32 a step where store_bfloat16s rounds them by
// instruction; otherwise one loop, which g++ vectorizes.
template <class Out, class Op, class... T, size_t... I>
ACTIVATIONS_CPU_WIDE_LOOP inline void map_elements_of(int64_t n, Out* out, Op& op, std::index_sequence<I...>,
                                                      const T*... x) {
  int64_t i = 0;
  if constexpr (kF16c && std::is_same_v<Out, c10::Half> && (std::is_same_v<T, c10::Half> && ...)) {
    for (; i + kHalfStep <= n; i += kHalfStep) {
      float v[sizeof...(T) + 1][kHalfStep], result[kHalfStep];  // + 1: no inputs (scale_columns) is no array
      (load_halves(x + i, v[I]), ...);
      for (int k = 0; k < kHalfStep; ++k) result[k] = op(i + k, v[I][k]...);
      store_halves(result, out + i);
    }
  } else if constexpr (kBFloat16ByInstruction && std::is_same_v<Out, c10::BFloat16>) {
    for (; i + 32 <= n; i += 32) {
      float result[32];
      for (int k = 0; k < 32; ++k) result[k] = op(i + k, load(x[i + k])...);
      store_bfloat16s(result, out + i);
    }
  }
#pragma GCC ivdep
  for (; i < n; ++i) out[i] = store<Out>(op(i, load(x[i])...));
}
template <class Out, class Op, class... T>
ACTIVATIONS_CPU_WIDE_LOOP inline void map_elements(int64_t n, Out* out, Op&& op, const T*... x) {
  map_elements_of(n, out, op, std::index_sequence_for<T...>{}, x...);
}

// out[i] = op(in[i]...) for i < n, computed in the compute type and rounded once on store. kMode >= 0: the
// functor's mode flag is set to that constant (see cpu_loop).
template <int kMode, class Op, class Out, class... In>
ACTIVATIONS_CPU_WIDE_LOOP void cpu_loop_with(int64_t n, Op op, Out* out, const In*... in) {
  if constexpr (kMode >= 0) op.f.tanh_form = kMode == 1;
  map_elements(n, out, [&op](int64_t, auto... v) { return op(v...); }, in...);
}

// A functor with a mode flag (GELU's tanh_form) gets a loop per mode, the flag a constant in each: g++ cannot
// vectorize a select on a loop-invariant bool, and at -O1 it had if-converted GELU's backward into one before
// -funswitch-loops could split the loop, so the float32 GELU backward ran scalar (12x slower than torch's).
template <class F, class = void>
struct HasModeFlag : std::false_type {};
template <class F>
struct HasModeFlag<F, std::void_t<decltype(std::declval<F&>().tanh_form)>> : std::true_type {};

#ifdef ACTIVATIONS_CPU_AVX512
// The float32 GELU (erf form) forward's generic loop, for gelu_forward_by_table's elements below its table.
void gelu_forward_generic(int64_t n, const float* x, float* y) {
  const double erf_form[1] = {0.0};
  cpu_loop_with<0>(n, Forward<Gelu<float>>{Gelu<float>(erf_form)}, y, x);
}
#endif

// The loops of a few instructions an element over float32 and float64 (the piecewise-linear forwards and the
// backwards from the output), which memory bounds, take 256-bit vectors on AMD's Zen 4, which runs each 512-bit
// instruction as two 256-bit halves (activations.py defines ACTIVATIONS_CPU_AVX512_IN_HALVES there), and 512 like the
// other loops on Intel's AVX-512 processors. torch/ours with 512-bit vectors -> with 256, the trees in turn: on the
// 2-core AMD EPYC (results/cpu-epyc-2026-12-07/loop_width_ab.log), one thread, the float32 ReLU forward at 6-12 MiB
// 0.88-0.97x -> 0.93-1.02x (three rounds); 2 threads at 2^22 elements (bench.py, two rounds) the piecewise-linear
// forwards 0.73-1.19x -> 0.98-1.17x, the float32 tanh and sigmoid backwards 0.95-1.04x -> 1.09-1.26x, float64
// 0.94-1.06x -> 1.00-1.15x (torch's own ReLU runs its AVX2 loop there). On the H100 host's Xeon (Emerald Rapids),
// 2 threads (results/h100-2026-12-07/loop_width_ab_xeon.log): float32 the same within the rounds' spread; float64,
// whose 32 MiB outputs stream there, as noisy as the loops it leaves alone (LeakyReLU's mask backward moved from
// 2.11-2.25x to 1.55-1.76x), but the hardsigmoid forward lost in both rounds, 1.53-1.74x -> 1.20-1.34x. An
// element's result is the same either way.
template <class Op, class Out>
constexpr bool memory_bound_loop() {
#ifdef ACTIVATIONS_CPU_AVX512_IN_HALVES
  using F = decltype(Op::f);
  if constexpr (!std::is_same_v<Out, compute_t<Out>>) {
    return false;  // 16-bit storage: its conversions are arithmetic that 512-bit vectors halve
  } else if constexpr (std::is_same_v<Op, Forward<F>>) {
    return F::kMask;
  } else {
    return std::is_same_v<Op, Backward<F, true>>;
  }
#else
  return false;  // the elementwise loop's width: 512 bits (Intel's AVX-512), 256 (AVX2), or not x86
#endif
}

template <class Op, class T, class... In>
ACTIVATIONS_CPU_LOOP void cpu_loop_256(int64_t n, Op op, T* out, const In*... in) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]...);
}

template <class Op, class Out, class... In>
void cpu_loop(int64_t n, Op op, Out* out, const In*... in) {
  if constexpr (HasModeFlag<decltype(op.f)>::value) {  // C++17: torch before 2.13 builds extensions with it
    if (op.f.tanh_form) return cpu_loop_with<1>(n, op, out, in...);
#ifdef ACTIVATIONS_CPU_AVX512
    if constexpr (std::is_same_v<Op, Forward<Gelu<float>>> && std::is_same_v<Out, float>) {  // float storage
      return gelu_forward_by_table(n, in..., out, gelu_forward_generic);  // see gelu_table_cpu.cpp
    }
#endif
    return cpu_loop_with<0>(n, op, out, in...);
  } else if constexpr (memory_bound_loop<Op, Out>() && (std::is_same_v<In, Out> && ...)) {
    cpu_loop_256(n, op, out, in...);
  } else {
    cpu_loop_with<-1>(n, op, out, in...);
  }
}

// Block conversions for cpu_widened and softmax: float16 kHalfStep at a time through F16C, bfloat16 by
// load()/store(), vectorized, or rounded 32 at a time by store_bfloat16s.
template <class T>
ACTIVATIONS_CPU_WIDE_LOOP void widen(int64_t n, const T* in, float* out) {
  int64_t i = 0;
  if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
    for (; i + kHalfStep <= n; i += kHalfStep) load_halves(in + i, out + i);
  }
#pragma GCC ivdep
  for (; i < n; ++i) out[i] = load(in[i]);
}
template <class T>
ACTIVATIONS_CPU_WIDE_LOOP void narrow(int64_t n, const float* in, T* out) {
  int64_t i = 0;
  if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
    for (; i + kHalfStep <= n; i += kHalfStep) store_halves(in + i, out + i);
  }
  if constexpr (kBFloat16ByInstruction && std::is_same_v<T, c10::BFloat16>) {
    for (; i + 32 <= n; i += 32) store_bfloat16s(in + i, out + i);
  }
#pragma GCC ivdep
  for (; i < n; ++i) out[i] = store<T>(in[i]);
}

// float16 and bfloat16 through the float loop a block at a time: widened into float buffers (in L1), mapped by
// the very loop that float32 tensors use, rounded back. So the op's math is compiled once for the three dtypes
// computed in float (the double backwards; see fused).
constexpr int64_t kWidenBlock = 1024;

template <class Op, class scalar_t, class... In, size_t... I>
void cpu_widened(int64_t n, Op op, scalar_t* out, std::index_sequence<I...>, const In*... in) {
  alignas(64) float inputs[sizeof...(In)][kWidenBlock];
  alignas(64) float result[kWidenBlock];
  for (int64_t first = 0; first < n; first += kWidenBlock) {
    const int64_t count = std::min(kWidenBlock, n - first);
    (widen(count, in + first, inputs[I]), ...);
    cpu_loop(count, op, result, static_cast<const float*>(inputs[I])...);
    narrow(count, static_cast<const float*>(result), out + first);
  }
}

// Whether a 16-bit tensor's loop converts inside the op's own loop (one pass over memory) rather than through
// cpu_widened: every forward and backward. Through the widening, the bfloat16 sigmoid backward ran at 0.57x of
// torch's (fused: 1.0x), and the float16 backwards at 0.71-0.93x of torch's where fused they run at 0.90-1.33x
// (ELU 0.71 -> 0.99, sigmoid 0.93 -> 1.33, tanh 0.75 -> 1.01, SiLU 0.82 -> 0.96, softplus 0.71 -> 0.90; the
// float16 forwards 0-27 % faster; one thread, 60 alternating samples each). The double backwards share the float
// loop: compiling them once per 16-bit dtype too made cpu_kernels.cpp take 10 s of g++ instead of 6 (the fused
// float16 forward and backward cost 0.5-0.8 s of it: 6.2-6.5 s -> 6.9-7.0 s).
template <class Op>
constexpr bool fused() {
  using F = decltype(Op::f);
  return !std::is_same_v<Op, DoubleBackward<F, true>> && !std::is_same_v<Op, DoubleBackward<F, false>>;
}

// Streaming stores for the large outputs of the piecewise-linear ops. A store to a line not in cache first
// reads the line (read for ownership): an output larger than the last-level cache, which cannot stay in it, costs
// a read of memory on top of its write. Streaming (non-temporal) stores write whole lines without reading them
// and bypass the caches, so such an output is computed a block at a time into a buffer in L1 and streamed out from
// there. The threshold, streaming_bytes(), is the L3 cache's size or 16 MiB for each of torch's threads, whichever
// is less (ACTIVATIONS_CPU_STREAMING_BYTES sets another; where the L3's size is unknown, nothing streams): a
// smaller output may be read back from the cache by whatever consumes it.
// 2-core Ice Lake Xeon (48 MiB L3), 2 threads, float32 in bench.py, base and streamed builds in turn, two rounds:
// the ReLU forward at 2^24 elements 1.00-1.02x torch's -> 1.34-1.38x, hardtanh 1.00-1.02x -> 1.28-1.39x (2^22,
// 16 MiB, unchanged). In a C++ loop there (tools/cpu_streaming_stores.cpp), ReLU and then a consumer that reads its
// output (z = 2 y + z) took 0.80-0.82x the time of the pair with plain stores at 2^24 elements, 0.99-1.01x at 2^22
// and 1.26-1.35x at 2^20: outputs that fit the cache do not stream.
// Per thread: the L3 that sysconf reports on a server is the whole socket's, shared by all of its cores (and, in a
// virtual machine, with other tenants' cores: 260 MiB on the 2-core Emerald Rapids VM, 300 MiB on the H200's
// 16-core host), so a process of a few threads can count on its share of it, not on the whole. The same C++ pair,
// time streamed/plain: Emerald Rapids, 2 threads: 8 MiB 1.10-1.12, 16 MiB 0.94-0.98, 32 MiB 0.90-0.94, 64 MiB
// 0.83-0.88; one thread: 8 MiB 1.00-1.05, 16 MiB 0.78-0.95. H200 host: 2 threads 32 MiB 0.94-1.07, 64 MiB
// 0.95-0.97, 128 MiB 0.76-0.80; 4 threads 64 MiB 0.85-0.95; 8 threads 128 MiB 0.81-0.83; 16 threads 64 MiB
// 0.95-1.07, 256 MiB 0.86-0.89 (32 MiB streamed there from 16 threads took 1.13-2.10x the time alone: it fitted
// their 16 L2 caches). With one thread per core, torch's default, the threshold stays the L3's size on any
// processor with less than 16 MiB of L3 a core.
// Only the mask rows (a select or a clamp an element) stream, in their forwards (cpu_elementwise, and
// for_mask_chunks where the forward writes the mask) and their backwards from the mask (for_mask_chunks): at 2^24
// float32 elements on the Ice Lake host, ReLU's and hardsigmoid's backwards went from 1.27-1.31x to 1.63-1.69x,
// their steps from 1.09-1.16x to 1.36-1.46x. The forwards with an exponential lost what their loops' compute had
// overlapped with the stores (with every output of 12 MiB or more streamed, GELU's at 2^22 went from 0.92-0.93x
// to 0.79-0.85x).
constexpr int64_t kLineBytes = 64;
#ifdef ACTIVATIONS_CPU_AVX2
typedef long long Bytes32 __attribute__((vector_size(32)));
constexpr int64_t kStreamBlockBytes = 1024;
constexpr int64_t kStreamingBytesPerThread = int64_t(16) << 20;

// ACTIVATIONS_CPU_STREAMING_BYTES where it is a whole number of bytes (anything else is ignored), else -1.
int64_t configured_streaming_bytes() {
  static const int64_t configured = [] {
    if (const char* text = getenv("ACTIVATIONS_CPU_STREAMING_BYTES")) {
      char* end = nullptr;
      const long long value = strtoll(text, &end, 10);
      if (end != text && *end == '\0' && value >= 0) return int64_t(value);
    }
    return int64_t(-1);
  }();
  return configured;
}

// The threshold: configured_streaming_bytes() where set, else the L3's size or kStreamingBytesPerThread for each of
// torch's threads (at::get_num_threads(), asked at each call: the user may change it), whichever is less.
int64_t streaming_bytes() {
  const int64_t configured = configured_streaming_bytes();
  static const int64_t l3_bytes = [] {
#ifdef _SC_LEVEL3_CACHE_SIZE  // glibc's; elsewhere (macOS) the size is unknown
    const long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return cache > 0 ? int64_t(cache) : INT64_MAX;
#else
    return INT64_MAX;
#endif
  }();
  if (configured >= 0) return configured;
  if (l3_bytes == INT64_MAX) return INT64_MAX;
  return std::min(l3_bytes, at::get_num_threads() * kStreamingBytesPerThread);
}

// bytes (a multiple of 32) from src to dst (32-byte aligned) by streaming stores. It must return with vzeroupper
// (see ACTIVATIONS_CPU_LOOP_FOR): with plain target("avx2") g++ 12 left the vector registers' upper halves dirty,
// and the SSE code of stream_blocks that ran next (ReLU's and hardsigmoid's, whose functors travel in xmm
// registers) stalled on them. Streamed forwards, 2 threads, Emerald Rapids, before -> after:
// float64 at 2^22 elements, ReLU 4.4 -> 1.15-1.21 ms, hardsigmoid 4.7-5.6 -> 1.55-1.60 ms (LeakyReLU and hardtanh
// 1.2-1.5 ms either way); bfloat16 at 2^24, ReLU 4.0-4.2 -> 1.40-1.52 ms, hardsigmoid 5.1-5.4 -> 2.7-2.8 ms.
ACTIVATIONS_CPU_LOOP_FOR("avx2") void stream_copy(void* dst, const void* src, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 32) {
    Bytes32 v;
    memcpy(&v, static_cast<const char*>(src) + i, sizeof v);
    __builtin_ia32_movntdq256(reinterpret_cast<Bytes32*>(static_cast<char*>(dst) + i), v);
  }
}

// compute(first, count, to) writes out[first, first + count) to `to`; over [begin, end), the elements before
// out's first line boundary are computed in place, the rest a block at a time into a buffer and streamed out
// (the last block's part past its last whole line copied plainly). The sfence orders the streaming stores before
// the chunk ends, so that whoever reads out after the parallel region sees them.
template <class T, class Compute>
void stream_blocks(int64_t begin, int64_t end, T* out, const Compute& compute) {
  constexpr int64_t kBlock = kStreamBlockBytes / sizeof(T);
  const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(out + begin) % kLineBytes);
  const int64_t head = std::min(end - begin, misaligned == 0 ? 0 : (kLineBytes - misaligned) / int64_t(sizeof(T)));
  if (head > 0) compute(begin, head, out + begin);
  alignas(kLineBytes) T block[kBlock];
  for (int64_t first = begin + head; first < end; first += kBlock) {
    const int64_t count = std::min(kBlock, end - first);
    compute(first, count, block);
    const int64_t bytes = count * int64_t(sizeof(T));
    const int64_t streamed = bytes / kLineBytes * kLineBytes;
    stream_copy(out + first, block, streamed);
    memcpy(reinterpret_cast<char*>(out + first) + streamed, reinterpret_cast<const char*>(block) + streamed,
           bytes - streamed);
  }
  __builtin_ia32_sfence();
}

// Whether the page that holds the last byte of [out, out + bytes) is in memory. A block that glibc's malloc maps
// afresh is not (by default every block of 32 MiB or more: such an output, each call): each page is faulted in at
// its first store, and the kernel zeroes it through the cache, so that a streaming store then writes a line that
// the cache holds dirty, and memory takes each line twice. The float64 ReLU and hardtanh forwards at 2^22 elements
// (32 MiB outputs), 2 threads, 2-core Zen 4, in a script with glibc's defaults
// (results/cpu-epyc-2026-12-07/streaming_fresh_pages.log), torch/ours: streamed 0.76-0.84x, with this test (plain
// stores there) 0.98-1.04x; with freed memory kept (bench.py's keep_freed_memory) streamed either way, 0.99-1.28x.
// (The first page is no test: malloc writes the block's header there.) Where residency cannot be asked, as if it
// were in memory; where ACTIVATIONS_CPU_STREAMING_BYTES sets the threshold, that alone decides (the tests stream
// every output so).
bool in_memory(const void* out, int64_t bytes) {
#ifdef __linux__
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t last = reinterpret_cast<uintptr_t>(out) + uintptr_t(bytes) - 1;
  unsigned char resident = 0;
  if (mincore(reinterpret_cast<void*>(last & ~(page - 1)), 1, &resident) != 0) return true;
  return (resident & 1) != 0;
#else
  return true;
#endif
}

// Whether an output of n elements of T at out streams: large enough, aligned to its elements (torch's are), and in
// memory already (in_memory) unless the threshold is set.
template <class T>
bool streams(int64_t n, const T* out) {
  const int64_t bytes = n * int64_t(sizeof(T));
  return bytes >= streaming_bytes() && reinterpret_cast<uintptr_t>(out) % sizeof(T) == 0 &&
         (configured_streaming_bytes() >= 0 || in_memory(out, bytes));
}
#else
template <class T>
bool streams(int64_t, const T*) {
  return false;
}
template <class T, class Compute>
void stream_blocks(int64_t begin, int64_t end, T* out, const Compute& compute) {
  compute(begin, end - begin, out + begin);
}
#endif

// An operand of a walk by rows (Rows in kernels.h): its data and its rows' stride. A dense operand's stride is the
// walk's row length (the whole call's n where no operand has rows), so that element i is data[i].
template <class T>
struct Operand {
  T* data;
  int64_t stride;
  T* at(int64_t row, int64_t column) const { return data + row * stride + column; }
};

// The row length of a call's walk: rows.length for an operand with rows, else n (one row: the dense walk).
inline int64_t row_length(const Rows& rows, int64_t n) { return rows.length > 0 ? rows.length : n; }
template <class T>
Operand<T> operand(T* data, const Rows& rows, int64_t length) {
  return {data, rows.length > 0 ? rows.stride : length};
}

// Prefetching short rows. A loop over a row of a few cache lines, rows apart in memory (a channels_last map's channel
// half: rows of 64 elements 128 apart), loads its lines at strides that change within the row (64 bytes, then the gap
// to the next row), which the processor's stride prefetcher evidently does not follow: the walk waits on memory at each
// row (perf puts most of the loop's samples on the first use of the input's load; bfloat16 rows of 32, one iteration of
// the loop each and so each load at one stride, ran 3x faster than rows of 64). So a walk by rows prefetches, in each
// operand that is not dense, the lines of the row kPrefetchAheadBytes ahead (in bytes of rows; at least one row) of the
// one it maps, where rows are at most kPrefetchRowBytes long: longer ones the stream prefetchers follow, and
// prefetching rows of 8 KiB too made the float32 ReLU forward over them slower. One thread on Zen 4, ns an element
// without and with the prefetch, three rounds in turn (results/cpu-epyc-2026-12-07/rows_prefetch_sweep.log): the
// bfloat16 SiLU forward over rows of 64 1.35-1.48 -> 0.39-0.48 (over rows of 2048, not prefetched, 0.40-0.47 either
// way); the float32 SiLU backward and GELU forward over rows of 32 2.13-2.17 -> 0.72-0.81 and 2.54-2.58 -> 0.61-0.62;
// over rows of 128-1024 elements the time times 0.49-1.24 round by round, median 0.79.
constexpr int64_t kPrefetchAheadBytes = 4096;
constexpr int64_t kPrefetchRowBytes = 2048;

// How far ahead of the row a piece maps a walk prefetches an operand, in bytes: kPrefetchAheadBytes of rows (at least
// one row), or 0 where the operand is dense or its rows are longer than kPrefetchRowBytes (not prefetched).
template <class T>
int64_t prefetch_distance(const Operand<T>& operand, int64_t length) {
  const int64_t row_bytes = length * int64_t(sizeof(T));
  if (operand.stride == length || row_bytes > kPrefetchRowBytes) return 0;
  return std::max<int64_t>(1, kPrefetchAheadBytes / row_bytes) * operand.stride * int64_t(sizeof(T));
}

// Prefetches the lines of the `count` elements `distance` bytes past `at` (nothing where distance is 0). Integer
// addresses: the row ahead may lie past the tensor, where a prefetch is harmless but a pointer undefined.
template <class T>
void prefetch_row(const T* at, int64_t count, int64_t distance) {
  if (distance == 0) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(at) + uintptr_t(distance);
  const uintptr_t end = start + uintptr_t(count * int64_t(sizeof(T)));
  for (uintptr_t line = start & ~uintptr_t(kLineBytes - 1); line < end; line += kLineBytes) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), std::is_const_v<T> ? 0 : 1);
  }
}

// piece(first, count, row, column) for [first, first + count) cut where rows of `length` elements end: each piece
// lies within one row of every operand, where the loops walk dense memory; the operands' short rows ahead are
// prefetched (prefetch_row). What does not change within a walk is worked out once: the prefetch distances, and the
// first piece's row and column (the next piece starts the next row). Worked out a row (a division for the row, one
// for each operand's distance), the float32 ReLU forward over channel halves in cache (1 x C x 32 x 32 of
// 1 x 2C x 32 x 32, one thread, two rounds in turn; results/cpu-epyc-2026-12-07/row_walk_once_ab.log) read 0.57-0.59x
// torch's over rows of 64, 0.69x over rows of 128 and 0.68-0.79x over rows of 256; worked out once, 0.66x, 0.75x and
// 0.77-0.82x. In memory (bench.py --chunked's channel half) the same within the rounds' spread.
template <class Piece, class... T>
void for_row_pieces(int64_t length, int64_t first, int64_t count, const Piece& piece, const Operand<T>&... operands) {
  const int64_t distances[] = {prefetch_distance(operands, length)...};
  int64_t row = first / length, column = first % length;
  for (const int64_t end = first + count; first < end; ++row, column = 0) {
    const int64_t n = std::min(end - first, length - column);
    const int64_t* distance = distances;
    (prefetch_row(operands.at(row, column), n, *distance++), ...);
    piece(first, n, row, column);
    first += n;
  }
}

// Whether streaming stores may write an output computed from these operands: only where every operand is dense. A
// walk by rows lost with them: one thread, the float32 ReLU forward over 2048 x 2048 of 2048 x 4096 (a 16 MiB output,
// which streams on one thread) read torch/ours 0.63-0.69x streamed and 0.92x with plain stores, while the dense
// 2048 x 2048 read 1.07-1.24x streamed (results/cpu-epyc-2026-12-07/streaming_fresh_pages.log).
template <class... Operands>
bool all_dense(int64_t length, const Operands&... operands) {
  return ((operands.stride == length) && ...);
}

// op over [0, n) on torch's CPU threads, in rows of `length` elements (n: dense); where kMayStream (the mask rows'
// forwards), a dense output of dense inputs that streams() goes out by stream_blocks. The lambda captures by value,
// and cpu_loop takes its values as arguments: captured references would have to be reloaded after every store
// through a byte pointer.
template <bool kMayStream, class scalar_t, class Op, class... In>
void cpu_elementwise(int64_t n, int64_t length, Op op, Operand<scalar_t> out, Operand<const In>... in) {
  const bool dense_out = out.stride == length;
  const bool streamed = kMayStream && all_dense(length, out, in...) && streams(n, out.data);
  parallel(n, kCpuGrain, [=](int64_t begin, int64_t end) {
    // to: where out[first] goes when out is dense (out itself, or stream_blocks' buffer).
    const auto compute = [&](int64_t first, int64_t count, scalar_t* to) {
      for_row_pieces(length, first, count, [&](int64_t i, int64_t m, int64_t row, int64_t column) {
        scalar_t* piece_out = dense_out ? to + (i - first) : out.at(row, column);
        if constexpr (std::is_same_v<scalar_t, compute_t<scalar_t>> || fused<Op>()) {
          cpu_loop(m, op, piece_out, in.at(row, column)...);
        } else {
          cpu_widened(m, op, piece_out, std::index_sequence_for<In...>{}, in.at(row, column)...);
        }
      }, out, in...);
    };
    if constexpr (kMayStream) {
      if (streamed) return stream_blocks(begin, end, out.data, compute);
    }
    compute(begin, end - begin, out.data + begin);
  });
}

// Whether F's forward returns its input or one of its constants (constants_are in activations.cuh).
template <class F, class = void>
struct SelectsConstants : std::false_type {};
template <class F>
struct SelectsConstants<F, std::void_t<decltype(std::declval<const F&>().constants_are(bfloat16_holds))>>
    : std::true_type {};

// The mask: bit k of byte b says whether element 8 b + k passes its gradient. y = f.forward(x) and the mask of
// f.passes(x), for n elements from a mask byte boundary: 32 elements, 4 mask bytes, a step. The flags are the
// compare's all-ones lanes (int32), 8 of them to a mask byte by one vmovmskps, the 4 bytes stored as one 32-bit
// word. (The loop used to take 8 elements a step, its byte through the stack, or, for bfloat16, write a flag byte
// per element into a buffer and pack each 8 of them with a 64-bit product; the 16-bit forwards with a mask took
// 1.4-1.9x the time of those without, one thread, and the bfloat16 and float16 steps of ReLU, LeakyReLU,
// hardtanh, ReLU6 and hardsigmoid ran at 0.58-0.94x of torch's.)
template <class F, class T, class Out>
ACTIVATIONS_CPU_WIDE_LOOP void cpu_forward_mask_loop(int64_t n, F f, const T* x, Out* y, uint8_t* mask) {
  using C = compute_t<T>;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    C v[32], r[32];
    int32_t passes[32];
    if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
#pragma GCC unroll 4
      for (int k = 0; k < 32; k += kHalfStep) load_halves(x + i + k, v + k);
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 32; ++k) v[k] = load(x[i + k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 32; ++k) {
      r[k] = f.forward(v[k]);
      passes[k] = f.passes(v[k]) ? -1 : 0;
    }
    if constexpr (kF16c && std::is_same_v<Out, c10::Half>) {
#pragma GCC unroll 4
      for (int k = 0; k < 32; k += kHalfStep) store_halves(r + k, y + i + k);
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 32; ++k) y[i + k] = store<Out>(r[k]);
    }
    const uint32_t bits = mask8(passes) | mask8(passes + 8) << 8 | mask8(passes + 16) << 16 | mask8(passes + 24) << 24;
    memcpy(mask + i / 8, &bits, sizeof bits);
  }
  for (; i < n; i += 8) {  // the last partial step, a mask byte at a time
    uint32_t bits = 0;
    for (int k = 0; k < 8 && i + k < n; ++k) {
      const C v = load(x[i + k]);
      y[i + k] = store<Out>(f.forward(v));
      bits |= uint32_t(f.passes(v)) << k;
    }
    mask[i / 8] = static_cast<uint8_t>(bits);
  }
}

// MaskBackward with its factors' special values decided outside the loop, both sides computed and one selected:
// the same bits, branch-free. A passing factor of 1 (LeakyReLU) passes the gradient as it is (1 * grad is grad,
// the zeros' signs and infinities included), without Coefficient::times' product (with the checks and selects that
// it had then, the bfloat16 LeakyReLU backward ran at 0.72-0.79x of torch's). k16BitResult: the factor rounded to
// float times the gradient, as LeakyRelu's 16-bit forward, within 2^-23 of the exact product, so the 16-bit result
// is correctly rounded or one ulp off (2 threads, 2^22 elements, torch/ours: bfloat16 LeakyReLU backward 0.87x ->
// 1.08x, float16 0.88x -> 1.43x, bfloat16 hardsigmoid 0.85x -> 1.18x).
template <class C, bool kPassingOne, bool kBlockedZero, bool k16BitResult>
struct MaskSelect {
  MaskBackward<C> m;
  static C product(const Coefficient<C>& factor, C grad) {
    return k16BitResult ? grad * factor.hi : factor.times(grad);
  }
  C operator()(C grad, bool passes) const {
    const C pass = kPassingOne ? grad : product(m.passing, grad);
    const C block = kBlockedZero ? C(0) : product(m.blocked, grad);
    return passes ? pass : block;
  }
};

// grad_in = backward(grad_out, bit) for n elements from a mask byte boundary. Computed in float: 32 elements (4
// mask bytes, one 32-bit load) a step, the loop over them unrolled so that g++ turns it into vectors: the bits
// broadcast, and-ed with 1 << k per lane, compared (no unpacked flags in memory). double goes mask byte by mask
// byte: g++ vectorizes the 8 elements of a byte (a broadcast of the byte, a shift by 0..7, an and), two vectors.
template <class B, class T>
ACTIVATIONS_CPU_LOOP void cpu_mask_backward_loop(int64_t n, B backward, const T* grad_out, const uint8_t* mask,
                                                 T* grad_in) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, double>) {
#pragma GCC ivdep
    for (; i + 8 <= n; i += 8) {
      const uint32_t bits = mask[i / 8];
      for (int k = 0; k < 8; ++k) grad_in[i + k] = backward(grad_out[i + k], (bits >> k) & 1u);
    }
  } else {
    for (; i + 32 <= n; i += 32) {
      uint32_t bits;
      memcpy(&bits, mask + i / 8, sizeof bits);
      float v[32], r[32];
      if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
#pragma GCC unroll 4
        for (int k = 0; k < 32; k += 8) load8(grad_out + i + k, v + k);
      } else {
#pragma GCC unroll 4
        for (int k = 0; k < 32; ++k) v[k] = load(grad_out[i + k]);
      }
#pragma GCC unroll 4
      for (int k = 0; k < 32; ++k) r[k] = backward(v[k], (bits & (1u << k)) != 0);
      if constexpr (kF16c && std::is_same_v<T, c10::Half>) {
#pragma GCC unroll 4
        for (int k = 0; k < 32; k += 8) store8(r + k, grad_in + i + k);
      } else {
#pragma GCC unroll 4
        for (int k = 0; k < 32; ++k) grad_in[i + k] = store<T>(r[k]);
      }
    }
  }
  for (; i < n; ++i) grad_in[i] = store<T>(backward(load(grad_out[i]), (mask[i / 8] >> (i % 8)) & 1u));
}

// The mask backward where `passing` is 1 and `blocked` 0 (ReLU, hardtanh, ReLU6): grad_in is grad_out or +0, the
// same values as MaskSelect's (NaN payloads aside), selected on the storage's bits without converting them: a
// 16-bit loop takes 16 elements a vector instead of 8 through float (the bfloat16 ReLU backward ran at 0.6x of
// torch's through float). Raw: an unsigned integer of the storage's width. 32 elements (a 32-bit load of the
// mask) a step, in vectors of 32 bytes written with GCC's vector types: lane k of a vector tests bit k of the mask
// bits it covers, broadcast to every lane, and keeps or clears its element. Left to the vectorizer (the
// same selects as unrolled scalar code), the loop stayed scalar, a cmov an element, where g++ 13.3 built it for
// 16-bit storage and where g++ 12 built it for 64-bit: on the H200 host, one thread, 2^18 elements in cache, the
// float16 ReLU, ReLU6 and hardtanh backwards ran at 0.83-0.86x of torch's.
// 1 << k in lane k, a compile-time constant: written as a loop, g++ 13.3 built the values at each call.
template <class Lanes, class Raw, size_t... K>
constexpr Lanes lane_bits(std::index_sequence<K...>) {
  return Lanes{static_cast<Raw>(Raw(1) << K)...};
}
template <class Raw>
ACTIVATIONS_CPU_LOOP void cpu_mask_copy_loop(int64_t n, const Raw* grad_out, const uint8_t* mask, Raw* grad_in) {
  constexpr int kLanes = 32 / sizeof(Raw);
  typedef Raw Lanes __attribute__((vector_size(32)));
  constexpr Lanes lane_bit = lane_bits<Lanes, Raw>(std::make_index_sequence<kLanes>{});
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32_t word;
    memcpy(&word, mask + i / 8, sizeof word);
#pragma GCC unroll 8
    for (int first = 0; first < 32; first += kLanes) {
      Lanes g;  // loaded whole before the store: in place, grad_in is grad_out
      memcpy(&g, grad_out + i + first, sizeof g);
      const Lanes bits = lane_bit & static_cast<Raw>(word >> first);
      g &= ~(Lanes)(bits == 0);  // a compare (all ones where true) and an and-not
      memcpy(grad_in + i + first, &g, sizeof g);
    }
  }
  for (; i < n; ++i) grad_in[i] = (mask[i / 8] >> (i % 8)) & 1u ? grad_out[i] : Raw(0);
}

// Calls loop(first element, count, first mask byte, to) over [0, n) on torch's CPU threads, split at byte
// boundaries so that no two threads write one mask byte; `to` is where the loop writes out[first, first + count):
// out + first, or a buffer that stream_blocks streams out, where out streams() and starts on a cache line (then its
// blocks, and the head before a chunk's first line, start on mask bytes too: 8 elements are at most 64 bytes).
template <class T, class Loop>
void for_mask_chunks(int64_t n, T* out, Loop loop, bool may_stream = true) {
  const bool streamed = may_stream && streams(n, out) && reinterpret_cast<uintptr_t>(out) % kLineBytes == 0;
  parallel((n + 7) / 8, kCpuGrain / 8, [=](int64_t begin, int64_t end) {
    const int64_t first = begin * 8, last = std::min(n, end * 8);
    if (streamed) {
      return stream_blocks(first, last, out,
                           [&](int64_t from, int64_t count, T* to) { loop(from, count, from / 8, to); });
    }
    loop(first, last - first, begin, out + first);
  });
}

}  // namespace

void cpu_forward(Functor functor, DType dtype, const double* args, const void* x, void* y, uint8_t* mask, int64_t n,
                 Rows x_rows, Rows y_rows) {
  const int64_t length = row_length(x_rows, n);  // x_rows.length, a multiple of 8 where a mask is written
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = CpuFunctor<decltype(tag), scalar_t>;
      const F f(args);
      const auto in = operand(static_cast<const scalar_t*>(x), x_rows, length);
      const auto run = [&](auto* y_data) {
        const auto out = operand(y_data, y_rows, length);
        if (mask == nullptr) return cpu_elementwise<F::kMask>(n, length, Forward<F>{f}, out, in);
        if constexpr (F::kMask) {
          // A piece starts on a mask byte: chunks do, and rows are whole bytes.
          const bool dense_out = out.stride == length;
          for_mask_chunks(n, out.data, [=](int64_t first, int64_t count, int64_t, auto* to) {
            for_row_pieces(length, first, count, [&](int64_t i, int64_t m, int64_t row, int64_t column) {
              cpu_forward_mask_loop(m, f, in.at(row, column), dense_out ? to + (i - first) : out.at(row, column),
                                    mask + i / 8);
            }, out, in);
          }, all_dense(length, out, in));
        }
      };
      if constexpr (std::is_same_v<scalar_t, c10::BFloat16> && SelectsConstants<F>::value) {
        if (f.constants_are(bfloat16_holds)) return run(static_cast<ExactBFloat16*>(y));
      }
      run(static_cast<scalar_t*>(y));
    });
  });
}

void cpu_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_out,
                  const void* saved, void* grad_in, int64_t n, Rows saved_rows) {
  const int64_t length = row_length(saved_rows, n);
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = CpuFunctor<decltype(tag), scalar_t>;
      const F f(args);
      const Operand<const scalar_t> g{static_cast<const scalar_t*>(grad_out), length};
      const auto s = operand(static_cast<const scalar_t*>(saved), saved_rows, length);
      const Operand<scalar_t> out{static_cast<scalar_t*>(grad_in), length};
      if constexpr (F::kFromOutput) {
        if (from_output) return cpu_elementwise<false>(n, length, Backward<F, true>{f}, out, g, s);
      }
      if constexpr (F::kFromInput) {
        if (!from_output) return cpu_elementwise<false>(n, length, Backward<F, false>{f}, out, g, s);
      }
    });
  });
}

void cpu_double_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_grad,
                         const void* grad_out, const void* saved, void* out, int64_t n) {
  with_functor(functor, [&](auto tag) {
    with_scalar_type(dtype, [&](auto storage) {
      using scalar_t = decltype(storage);
      using F = CpuFunctor<decltype(tag), scalar_t>;
      const F f(args);
      const Operand<const scalar_t> gg{static_cast<const scalar_t*>(grad_grad), n};
      const Operand<const scalar_t> g{static_cast<const scalar_t*>(grad_out), n};
      const Operand<const scalar_t> s{static_cast<const scalar_t*>(saved), n};
      const Operand<scalar_t> result{static_cast<scalar_t*>(out), n};
      if constexpr (F::kFromOutput) {
        if (from_output) return cpu_elementwise<false>(n, n, DoubleBackward<F, true>{f}, result, gg, g, s);
      }
      if constexpr (F::kFromInput) {
        if (!from_output) return cpu_elementwise<false>(n, n, DoubleBackward<F, false>{f}, result, gg, g, s);
      }
    });
  });
}

void cpu_mask_backward(DType dtype, double passing, double blocked, const void* grad_out, const uint8_t* mask,
                       void* grad_in, int64_t n) {
  with_scalar_type(dtype, [&](auto storage) {
    using scalar_t = decltype(storage);
    using C = compute_t<scalar_t>;
    const MaskBackward<C> backward(passing, blocked);
    const auto* g = static_cast<const scalar_t*>(grad_out);
    auto* out = static_cast<scalar_t*>(grad_in);
    const auto run = [=](auto select) {
      for_mask_chunks(n, out, [=](int64_t first, int64_t count, int64_t byte, scalar_t* to) {
        cpu_mask_backward_loop(count, select, g + first, mask + byte, to);
      });
    };
    if (passing == 1.0 && blocked == 0.0) {
      using Raw = std::conditional_t<sizeof(scalar_t) == 2, uint16_t,
                                     std::conditional_t<sizeof(scalar_t) == 4, uint32_t, uint64_t>>;
      const auto* g_raw = static_cast<const Raw*>(grad_out);
      auto* out_raw = static_cast<Raw*>(grad_in);
      return for_mask_chunks(n, out_raw, [=](int64_t first, int64_t count, int64_t byte, Raw* to) {
        cpu_mask_copy_loop(count, g_raw + first, mask + byte, to);
      });
    }
    constexpr bool k16Bit = sizeof(scalar_t) == 2;
    if (passing == 1.0) return run(MaskSelect<C, true, false, k16Bit>{backward});  // LeakyReLU
    if (backward.blocked_is_zero) return run(MaskSelect<C, false, true, k16Bit>{backward});  // hardsigmoid
    run(MaskSelect<C, false, false, k16Bit>{backward});
  });
}

}  // namespace activations

#include "softmax_cpu.cpp"
