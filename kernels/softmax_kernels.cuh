// CUDA softmax and log_softmax, forward and backward (softmax.h): the kernels, included only by the generated
// units softmax_<type>_<direction>.cu, so that nvcc compiles them side by side (softmax_launch.cuh). Pure CUDA.
//
// Rows (inner == 1) take one of three paths, by length (plan_rows):
// - In registers: rows of up to 8192 elements are read once into the registers of part of a warp (short rows, a
//   warp taking several), a warp or a block (up to 256 threads x 32 elements). One read and one write per element
//   (a backward: see regs_backward).
// - Staged in shared memory: longer rows, up to 16 blocks' parts of 112 KB (float32: 458K elements), are read
//   once into the shared memory of a thread-block cluster (sm_90+; one block without clusters), whose blocks
//   exchange the row's max and sum through distributed shared memory. One read and one write per element; the
//   other passes over the row read shared memory.
// - Longer rows (and 16-bit forwards past 8 blocks, float64 rows, rows past one block without clusters): two
//   passes. Blocks reduce parts of a row to partial (max, sum) pairs in a workspace, then each block combines its
//   row's pairs and writes its part, reading it again.
// A row need not start on a 16-byte boundary (one of 50257 floats does not): see load_vec.
// Columns (inner > 1): in tiles of neighbouring columns staged in a block's shared memory, one read and one write
// per element (plan_columns); where a tile does not fit, one thread per column, an online (max, compensated sum)
// pass, then the writing pass.
//
// All math is in float (double for float64); 16-bit results are rounded once. A row with a NaN or +inf gives
// NaN everywhere, a row of all -inf NaN too (0 / 0), as torch's.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <iterator>
#include <type_traits>
#include <utility>

#include "cluster_launch.cuh"
#include "softmax_launch.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define ACTIVATIONS_SOFTMAX_CLUSTERS 1
#else
#define ACTIVATIONS_SOFTMAX_CLUSTERS 0
#endif

namespace activations {
namespace softmax_cuda {

namespace cg = cooperative_groups;

// Storage type -> compute type C, with the widening load and the rounding store.
template <class S>
struct Num {
  using C = S;
  static __device__ __forceinline__ C load(S v) { return v; }
  static __device__ __forceinline__ S store(C v) { return v; }
};
template <>
struct Num<__half> {
  using C = float;
  static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using C = float;
  static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
// exp(v) for a result held in S: expf / exp for float and double; for float16 and bfloat16 the elementwise
// kernels' exp_for_16bit (activations.cuh), __expf on the GPU: ex2.approx.f32 of v log2(e), two instructions where
// expf takes about a dozen (the staged bfloat16 softmax forward was compute-bound in its output pass: 4096 x 393216 in 8 blocks a
// row, 3.70 ms against log_softmax's 2.75). ex2.approx is within 2^-22 relative (PTX ISA) and, without -ftz (these
// kernels are built without it), keeps subnormal results, which bfloat16 holds; rounding v log2(e) adds
// 2^-24 |v log2(e)| relative, below 2^-16.5 for |v| < 104, past which exp(v) is 0 in both types: under a 128th of
// a 16-bit ulp.
template <class S, class C>
__device__ __forceinline__ C exp_for(C v) {
  if constexpr (sizeof(S) == 2) {
    return exp_for_16bit(v);
  } else {
    return exp_(v);
  }
}
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }

// s, a sum of exp(x - m) over some of a row's values, as a sum of exp(x - row_max) (row_max >= m, the max over
// all of them): 0 where those values were all -inf (m = -inf, s = 0) or the whole row is (row_max = -inf), a NaN
// kept. Merging partial (max, sum) pairs, within a block (block_merge) and across a cluster (cluster_combine).
template <class S, class C>
__device__ __forceinline__ C rescaled_sum(C m, C s, C row_max) {
  if (s != s) return s;
  return (m == -INFINITY || row_max == -INFINITY) ? C(0) : s * exp_for<S>(m - row_max);
}

// The max that keeps a NaN (fmax would drop it, and a row with a NaN must give NaN everywhere).
template <class C>
__device__ __forceinline__ C max_nan(C a, C b) {
  return (a > b || a != a) ? a : b;
}

struct Max {
  template <class C>
  __device__ __forceinline__ C operator()(C a, C b) const { return max_nan(a, b); }
  template <class C>
  static __device__ __forceinline__ C identity() { return -INFINITY; }
};
struct Sum {
  template <class C>
  __device__ __forceinline__ C operator()(C a, C b) const { return a + b; }
  template <class C>
  static __device__ __forceinline__ C identity() { return C(0); }
};

constexpr float kLog2e = 1.44269504088896341f;

// 2^t with results below 2^-126 flushed to 0: one ex2.approx.ftz (relative error 2^-22), where ex2.approx without
// .ftz takes four instructions to keep subnormal results.
__device__ __forceinline__ float exp2_flushed(float t) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}

// exp(d) for d = x - max <= 0, as a term of a forward's sum of exponentials. A 16-bit row's term is
// exp2_flushed(d log2(e)), exp_for's error: a term it flushes to 0 is below 2^-126, beside the max's term of 1.
template <class S, class C>
__device__ __forceinline__ C exp_term(C d) {
  if constexpr (sizeof(S) == 2) {
    return exp2_flushed(d * kLog2e);
  } else {
    return exp_(d);
  }
}

// A forward's output from d = x - max, given the sum s of exp(x - max): softmax exp(d) / s, log_softmax
// d - log(s). A 16-bit softmax output is 2^(d log2(e) + 64) (s 2^64)^-1: one fma, one exp2_flushed and one
// product. The 2^64 keeps bfloat16's subnormal outputs (down to 2^-133), which exp2_flushed alone would flush,
// without ex2's four-instruction subnormal path. The fma rounds the exponent (at most 64, and past -126 where the
// result is 0) to within 2^-18, 2^-18.5 relative in the result.
template <class S, class C>
struct ForwardOutput {
  static constexpr bool k16Bit = sizeof(S) == 2;
  ForwardOutput() = default;
  __device__ __forceinline__ ForwardOutput(C s, bool log)
      : log(log), log_s(log ? log_(s) : C(0)), scale(k16Bit ? C(1) / s * C(0x1p-64) : C(1) / s) {}
  __device__ __forceinline__ C operator()(C d) const {
    if (log) return d - log_s;
    if constexpr (k16Bit) {
      return exp2_flushed(fmaf(d, kLog2e, 64.0f)) * scale;
    } else {
      return exp_(d) * scale;
    }
  }
  bool log;
  C log_s, scale;
};

template <class S, int V>
struct alignas(sizeof(S) * V) Vec {
  S v[V];
};

// Rows are read and written in V-wide vectors on the 16-byte grid. Where every row starts on it (n a multiple of V,
// the first row at a 16-byte boundary), kEdges is false and a vector is whole or past the row's end. Otherwise
// (rows of an odd length) a row's element 0 sits at position `shift` of its first vector: position p of the grid,
// counted from the row's first vector, holds element p - shift, and the row spans positions [0, n + shift). Every
// operand of a call has the same address mod 16 (the host checks), so all share the row's shift. A vector that
// holds elements outside the row (the row's first and last) is then read and written element by element: no byte
// outside the row is touched. The edge code costs time where it is compiled in, hence the two variants.
template <class S, int V, bool kEdges>
__device__ __forceinline__ int row_shift(const S* row) {
  if constexpr (!kEdges) return 0;
  return static_cast<int>((reinterpret_cast<uintptr_t>(row) / sizeof(S)) % V);
}

// A 16-byte vector's bits as four words.
__device__ __forceinline__ unsigned bits_of(float a) { return __float_as_uint(a); }
__device__ __forceinline__ unsigned bits_of(__half lo, __half hi) {
  return static_cast<unsigned>(__half_as_ushort(lo)) | static_cast<unsigned>(__half_as_ushort(hi)) << 16;
}
__device__ __forceinline__ unsigned bits_of(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(lo)) | static_cast<unsigned>(__bfloat16_as_ushort(hi)) << 16;
}
template <class S, int V>
__device__ __forceinline__ uint4 words_of(const Vec<S, V>& v) {
  if constexpr (sizeof(S) == 8) {
    const auto lo = [](double d) { return static_cast<unsigned>(__double_as_longlong(d)); };
    const auto hi = [](double d) { return static_cast<unsigned>(static_cast<uint64_t>(__double_as_longlong(d)) >> 32); };
    return make_uint4(lo(v.v[0]), hi(v.v[0]), lo(v.v[1]), hi(v.v[1]));
  } else if constexpr (sizeof(S) == 4) {
    return make_uint4(bits_of(v.v[0]), bits_of(v.v[1]), bits_of(v.v[2]), bits_of(v.v[3]));
  } else {
    return make_uint4(bits_of(v.v[0], v.v[1]), bits_of(v.v[2], v.v[3]), bits_of(v.v[4], v.v[5]), bits_of(v.v[6], v.v[7]));
  }
}

// What a load or store tells L2 (split_in_steps): nothing; keep the line (evict_last: the partial pass's reads, which
// the apply pass reads again); or the line's last use (evict_first: the apply pass's reads and writes).
enum CacheHint { kNoHint, kKeepInL2, kLastUse };

// One whole vector from global memory (through the read-only cache) and to it. A 16-byte store is written in PTX:
// written in C++, nvcc split it into element stores where the same values were also stored element by element
// (store_vec's edge path, the cluster kernels' stores), and 16-bit rows ran at half speed.
template <class S, int V, int kHint = kNoHint>
__device__ __forceinline__ Vec<S, V> load_whole(const S* p) {
  if constexpr (sizeof(Vec<S, V>) == 16) {
    uint4 w;
    if constexpr (kHint == kKeepInL2) {
      uint64_t policy;
      asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
      asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
          : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
          : "l"(p), "l"(policy));
    } else if constexpr (kHint == kLastUse) {
      w = __ldcs(reinterpret_cast<const uint4*>(p));
    } else {
      w = __ldg(reinterpret_cast<const uint4*>(p));
    }
    Vec<S, V> v;
    memcpy(&v, &w, sizeof v);
    return v;
  } else {
    return *reinterpret_cast<const Vec<S, V>*>(p);
  }
}

template <class S, int V, int kHint = kNoHint>
__device__ __forceinline__ void store_whole(S* p, const Vec<S, V>& v) {
  if constexpr (sizeof(Vec<S, V>) == 16) {
    const uint4 w = words_of(v);
    if constexpr (kHint == kLastUse) {
      asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
    } else {
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
    }
  } else {
    *reinterpret_cast<Vec<S, V>*>(p) = v;
  }
}

// The vector at grid position p (a multiple of V) of a row; `fill` where it holds no element of the row.
template <class S, int V, bool kEdges, int kHint = kNoHint>
__device__ __forceinline__ Vec<S, V> load_vec(const S* row, int64_t n, int shift, int64_t p, S fill) {
  const int64_t i = p - shift;
  if (kEdges ? i >= 0 && i + V <= n : i < n) return load_whole<S, V, kHint>(row + i);
  Vec<S, V> v;
#pragma unroll
  for (int k = 0; k < V; ++k) v.v[k] = (kEdges && i + k >= 0 && i + k < n) ? row[i + k] : fill;
  return v;
}

// Writes the row's elements of the vector at grid position p, element k being value(k) (in the compute type).
template <class S, int V, bool kEdges, int kHint = kNoHint, class Value>
__device__ __forceinline__ void store_vec(S* row, int64_t n, int shift, int64_t p, Value value) {
  using N = Num<S>;
  const int64_t i = p - shift;
  if (kEdges ? i >= 0 && i + V <= n : i < n) {
    Vec<S, V> v;
#pragma unroll
    for (int k = 0; k < V; ++k) v.v[k] = N::store(value(k));
    store_whole<S, V, kHint>(row + i, v);
  } else if constexpr (kEdges) {
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (i + k >= 0 && i + k < n) row[i + k] = N::store(value(k));
  }
}

// Visits positions first, first + stride, ... below end: use(p, load(p)) for each, with kUnroll loads in flight
// before their uses.
template <int kUnroll, class Load, class Use>
__device__ __forceinline__ void for_each_strided(int64_t first, int64_t end, int64_t stride, Load load, Use use) {
  for (; first < end; first += kUnroll * stride) {
    decltype(load(first)) q[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (first + u * stride < end) q[u] = load(first + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (first + u * stride < end) use(first + u * stride, q[u]);
  }
}

// Visits this thread's vectors among grid positions [begin, end) of a row (thread t: begin + t V, then strides of
// kThreads V), as for_each_strided.
template <int kThreads, int V, int kUnroll, class Load, class Use>
__device__ __forceinline__ void for_each_vector(int64_t begin, int64_t end, Load load, Use use) {
  for_each_strided<kUnroll>(begin + threadIdx.x * V, end, static_cast<int64_t>(kThreads) * V, load, use);
}

template <int kWidth, class C, class Op>
__device__ __forceinline__ C warp_reduce(C v, Op op) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Over the whole block (kThreads threads); every thread gets the result. scratch: 32 values of shared memory.
template <int kThreads, class C, class Op>
__device__ __forceinline__ C block_reduce(C v, Op op, C* scratch) {
  v = warp_reduce<32>(v, op);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  const int first = threadIdx.x / kThreads * (kThreads / 32);  // this row's first warp: a block may hold several
  v = scratch[first];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) v = op(v, scratch[first + w]);
  __syncthreads();  // scratch is reused by the next reduction
  return v;
}

// Over the blocks of the cluster: `v` is this block's value (the same in all its threads). Each block publishes
// it in its `slot`; lane b of the first warp reads block b's (cluster sizes are at most 16), so that the remote
// reads are in flight together, and the warp's tree combines them in the same order in every block (all blocks
// get the same bits). Read one after another, the 16 remote reads of a 16-block cluster took about 16 times a
// distributed-shared-memory latency per reduction, two reductions a row. The result is shared through `result`.
// kArriveEarly: once a kernel, the block then exits through cluster_exit_sync<true> (arriving early ran the
// bfloat16 backward at 4096 x 393216 in 5.01 ms against 5.15, float32 as before:
// results/h100-2026-11-25/ab_cluster_exit.log). Otherwise once a row, with another slot and result for the next
// row, as cluster_combine's slots.
template <bool kArriveEarly = true, class C, class Op>
__device__ __forceinline__ C cluster_reduce(C v, Op op, C* slot, C* result) {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) *slot = v;
  cluster.sync();
  if (threadIdx.x < 32) {
    const unsigned lane = threadIdx.x;
    C r = lane < cluster.num_blocks() ? *cluster.map_shared_rank(slot, lane) : Op::template identity<C>();
    r = warp_reduce<32>(r, op);
    if (lane == 0) *result = r;
  }
  __syncthreads();
  if constexpr (kArriveEarly) __cluster_barrier_arrive_relaxed();  // done reading the others' memory
  return *result;
#else
  __trap();
  return v;
#endif
}

// The row's max and sum of exp(x - max), from each block's own max m_b and sum s_b of exp(x - m_b), in one
// exchange over the cluster (one cluster-wide sync a row where a max and then a sum took two): lane b of the first
// warp reads block b's pair, the warp takes the row's max M and sums s_b exp(m_b - M), in the same order in every
// block. A block whose part is all -inf (or past the row's end) has s_b = 0 and adds 0; a row of all -inf gets a
// sum of 0, and exp(x - M) / 0 is NaN, as torch's; a NaN or +inf anywhere makes the sum NaN. slots: 4 values of
// shared memory. Once a row: a block that arrived early waits for the barrier before its next exchange and
// before it exits (cluster_exit_sync<kArriveEarly>); one that did not passes another pair of slots to the next
// exchange, whose sync all blocks reach only after reading this one's.
template <bool kArriveEarly, class S, class C>
__device__ __forceinline__ void cluster_combine(C& m, C& s, C* slots) {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) {
    slots[0] = m;
    slots[1] = s;
  }
  cluster.sync();
  if (threadIdx.x < 32) {
    const unsigned lane = threadIdx.x;
    C block_m = -INFINITY, block_s = 0;
    if (lane < cluster.num_blocks()) {
      block_m = *cluster.map_shared_rank(&slots[0], lane);
      block_s = *cluster.map_shared_rank(&slots[1], lane);
    }
    const C row_m = warp_reduce<32>(block_m, Max{});
    const C row_s = warp_reduce<32>(rescaled_sum<S>(block_m, block_s, row_m), Sum{});
    if (lane == 0) {
      slots[2] = row_m;
      slots[3] = row_s;
    }
  }
  __syncthreads();
  if constexpr (kArriveEarly) __cluster_barrier_arrive_relaxed();  // done reading the others' memory
  m = slots[2];
  s = slots[3];
#else
  __trap();
#endif
}

// The reduction over one row's threads: kRowThreads lanes of a warp, a block, or a cluster of blocks.
template <int kRowThreads, bool kCluster>
struct RowReduce {
  template <class C, class Op>
  static __device__ __forceinline__ C run(C v, Op op, C* scratch, C* slot, C* result) {
    if constexpr (kRowThreads <= 32) {
      return warp_reduce<kRowThreads>(v, op);
    } else {
      v = block_reduce<kRowThreads>(v, op, scratch);
      if constexpr (kCluster) v = cluster_reduce(v, op, slot, result);
      return v;
    }
  }
};

// Before a block of a cluster exits: the wait for every block to be done reading its shared memory. Where the
// blocks arrived at that barrier as soon as their one exchange had read the others' slots (kArrivedEarly:
// cluster_reduce always, cluster_combine when told), they only wait here, after their writing pass, and the
// barrier's latency is hidden; otherwise the cluster syncs here. Relaxed: the remote reads are complete (their
// values were used) before a block arrives.
template <bool kArrivedEarly>
__device__ __forceinline__ void cluster_exit_sync() {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
  if constexpr (kArrivedEarly) {
    __cluster_barrier_wait();
  } else {
    cg::this_cluster().sync();
  }
#endif
}

template <bool kCluster>
__device__ __forceinline__ void cluster_position(unsigned& rank, unsigned& blocks_per_row) {
  rank = 0;
  blocks_per_row = 1;
  if constexpr (kCluster) {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
    rank = cg::this_cluster().block_rank();
    blocks_per_row = cg::this_cluster().num_blocks();
#endif
  }
}

__host__ __device__ constexpr int block_threads(int row_threads) { return row_threads < 256 ? 256 : row_threads; }

// ---------------------------------------------------------------------------------------------------------------
// Rows in registers. A row is held by kRowThreads threads, E elements each, in V-wide vectors: thread `lane`
// holds elements (j * kRowThreads + lane) * V + k. Below 32 threads a row, a warp's lanes hold 32 / kRowThreads
// rows, each reduced by the shuffles within its lanes (warp_reduce<kRowThreads>). Positions past the row's end
// read as -inf (forward) or 0 (backward) and are never written. Every row starts on the 16-byte grid (n a multiple
// of V, the first row on it) or V is 1. Plain C++ loads and stores, not load_vec's: with them these short rows ran
// up to 1.12x slower (H100, 262144 x 1024 float32: 0.80 ms against 0.73).

template <class S, int V, int E, int kRowThreads>
__global__ void __launch_bounds__(block_threads(kRowThreads))
    regs_forward(const S* __restrict__ x, S* __restrict__ y, int64_t rows, int64_t n, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  constexpr int kRowsPerBlock = block_threads(kRowThreads) / kRowThreads;
  __shared__ C scratch[32];
  C* const kNoCluster = nullptr;  // RowReduce's cluster slots: one block a row
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const bool in_rows = row < rows;
  const S* xr = x + (in_rows ? row : 0) * n;
  C v[E];
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {  // n is a multiple of V
      const Vec<S, V> p = *reinterpret_cast<const Vec<S, V>*>(xr + i);
#pragma unroll
      for (int k = 0; k < V; ++k) v[j * V + k] = N::load(p.v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) v[j * V + k] = -INFINITY;
    }
  }
  C m = v[0];
#pragma unroll
  for (int e = 1; e < E; ++e) m = max_nan(m, v[e]);
  m = RowReduce<kRowThreads, false>::run(m, Max{}, scratch, kNoCluster, kNoCluster);
  C s = 0;
  if (log) {
#pragma unroll
    for (int e = 0; e < E; ++e) s += exp_for<S>(v[e] - m);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      v[e] = exp_for<S>(v[e] - m);
      s += v[e];
    }
  }
  s = RowReduce<kRowThreads, false>::run(s, Sum{}, scratch, kNoCluster, kNoCluster);
  const C log_s = log ? log_(s) : C(0), inv_s = C(1) / s;
  S* yr = y + (in_rows ? row : 0) * n;
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      Vec<S, V> p;
#pragma unroll
      for (int k = 0; k < V; ++k) p.v[k] = N::store(log ? (v[j * V + k] - m) - log_s : v[j * V + k] * inv_s);
      *reinterpret_cast<Vec<S, V>*>(yr + i) = p;
    }
  }
}

// The backward reads each operand once. softmax keeps both in registers (grad_in = y * (g - sum(g y))): g as read,
// y in the compute type. It used to keep y alone and read g again in the second pass, from the L1 or L2 cache,
// and ran at 80 % of the floor where Liger-Kernel's kernel, which keeps both, ran at 100 % (H100, 262144 x 1024
// float32: 1.336 ms against 1.054). log_softmax, whose sum needs g alone, keeps g and reads y in the second pass
// only (grad_in = g - exp(y) sum(g)).
template <class S, int V, int E, int kRowThreads, bool kLog>
__global__ void __launch_bounds__(block_threads(kRowThreads))
    regs_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t rows, int64_t n) {
  constexpr bool log = kLog;  // a kernel each: softmax's keeps twice the registers, which would cost log_softmax's
                              // occupancy (bfloat16 log_softmax at 65536 x 4096: 0.562 ms against 0.529)
  using N = Num<S>;
  using C = typename N::C;
  constexpr int kRowsPerBlock = block_threads(kRowThreads) / kRowThreads;
  __shared__ C scratch[32];
  C* const kNoCluster = nullptr;  // RowReduce's cluster slots: one block a row
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const bool in_rows = row < rows;
  const int64_t offset = (in_rows ? row : 0) * n;
  // Kept as read (16-bit values in half the registers), converted where used.
  Vec<S, V> kept[E / V];   // log_softmax: g; softmax: y
  Vec<S, V> grads[E / V];  // softmax: g
  C d = 0;
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      const Vec<S, V> pg = *reinterpret_cast<const Vec<S, V>*>(g + offset + i);
      if (log) {
        kept[j] = pg;
#pragma unroll
        for (int k = 0; k < V; ++k) d += N::load(pg.v[k]);
      } else {
        const Vec<S, V> py = *reinterpret_cast<const Vec<S, V>*>(y + offset + i);
        kept[j] = py;
        grads[j] = pg;
#pragma unroll
        for (int k = 0; k < V; ++k) d += N::load(pg.v[k]) * N::load(py.v[k]);
      }
    }
  }
  d = RowReduce<kRowThreads, false>::run(d, Sum{}, scratch, kNoCluster, kNoCluster);
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      const Vec<S, V> po = log ? *reinterpret_cast<const Vec<S, V>*>(y + offset + i) : grads[j];
      Vec<S, V> p;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C o = N::load(po.v[k]), kv = N::load(kept[j].v[k]);
        p.v[k] = N::store(log ? kv - exp_for<S>(o) * d : kv * (o - d));
      }
      *reinterpret_cast<Vec<S, V>*>(gi + offset + i) = p;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Rows staged in shared memory. Block `rank` of a row's cluster (the only block without clusters) holds grid
// positions [rank * part, (rank + 1) * part) of the row (see load_vec; `part` a multiple of V) in its dynamic
// shared memory: the first pass reads them from global memory (the forward's 16-bit rows by cp.async, the whole
// part in flight; otherwise kStagedUnroll vectors in flight a thread), the passes after it read shared memory.
// With at most kStagedBytes a block, two blocks share an SM (three where parts are at most 64 KB: the forward is
// built for 40 registers a thread), so one's reductions and shared-memory passes overlap the other's reads and
// writes. A forward's cluster may take several rows in turn (staged_clusters), copying the next row's part into
// each vector of shared memory as soon as its writing pass has used it.

constexpr int kStagedThreads = 512;
constexpr int kStagedUnroll = 4;
constexpr int64_t kStagedBytes = 112 * 1024;  // two blocks in an H100 SM's 228 KB, with 1 KB reserved for each

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80+), and the wait for
// all of this thread's copies.
__device__ __forceinline__ void copy16_async(void* shared, const void* global) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global) : "memory");
#else
  *static_cast<uint4*>(shared) = *static_cast<const uint4*>(global);
#endif
}
__device__ __forceinline__ void wait_async_copies() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

template <class S, int V>
__device__ __forceinline__ Vec<S, V>* staged_vectors() {
  extern __shared__ __align__(16) unsigned char staged_memory[];
  return reinterpret_cast<Vec<S, V>*>(staged_memory);
}

// Block `rank`'s part of a staged row whose offset from the 16-byte grid is `shift`: grid positions [begin, end)
// (see load_vec), `count` vectors, none where past the row's end. P: the kernel's record of a part.
template <int V, class P>
__device__ __forceinline__ void set_part_bounds(P& p, int64_t n, unsigned rank, int64_t part) {
  p.begin = rank * part;
  p.end = min(n + p.shift, p.begin + part);
  p.count = p.end > p.begin ? (p.end - p.begin + V - 1) / V : 0;
}

// Two 16-bit values in one register, as the packed instructions take them.
template <class S>
using PairOf = std::conditional_t<std::is_same_v<S, __half>, __half2, __nv_bfloat162>;

// This thread's max over vectors j = threadIdx.x, + kStagedThreads, ... below count of a staged 16-bit part, NaN
// kept: pairs compared by one packed instruction (HMNMX2 with .NAN), where widening and comparing every element
// took about eight times the instructions.
template <class S, int V>
__device__ __forceinline__ float staged_max(const Vec<S, V>* stage, int64_t count) {
  using Pair = PairOf<S>;
  static_assert(sizeof(S) == 2 && V % 2 == 0, "16-bit vectors of pairs");
  Pair m;
  m.x = m.y = Num<S>::store(-INFINITY);
  for (int64_t j = threadIdx.x; j < count; j += kStagedThreads) {
    const Vec<S, V> q = stage[j];
    const Pair* pairs = reinterpret_cast<const Pair*>(&q);
#pragma unroll
    for (int k = 0; k < V / 2; ++k) m = __hmax2_nan(m, pairs[k]);
  }
  return max_nan(Num<S>::load(m.x), Num<S>::load(m.y));
}

// One block's rows of a staged forward (see staged_forward). kCopyAsync: every whole vector of a part is copied
// into shared memory at once by cp.async, and the cluster takes rows r, r + clusters, ... (staged_clusters),
// copying its next row's vector j once the writing pass has used this row's. Otherwise the part loads through
// registers, kStagedUnroll vectors in flight a thread, and the cluster takes one row.
template <bool kCopyAsync, class S, int V, bool kEdges, bool kCluster, class C>
__device__ __forceinline__ void staged_forward_rows(const S* __restrict__ x, S* __restrict__ y, int64_t rows,
                                                    int64_t n, int64_t part, bool log, C* scratch, C (*slots)[4]) {
  using N = Num<S>;
  // Arriving at the cluster's barrier as soon as the exchange has read the other blocks' slots ran float32 rows
  // faster and 16-bit rows, one a cluster, slower (H100, results/h100-2026-11-25/ab_cluster_exit.log: softmax
  // 4096 x 393216 float32 5.10 -> 4.78 ms, 8192 x 50257 1.24 -> 1.20; bfloat16 4096 x 393216 2.63 -> 2.81, 4096 x
  // 131072 0.81 -> 0.83).
  constexpr bool kArriveEarly = !kCopyAsync;
  Vec<S, V>* stage = staged_vectors<S, V>();
  unsigned rank, blocks_per_row;
  cluster_position<kCluster>(rank, blocks_per_row);
  const int64_t clusters = gridDim.x / blocks_per_row;  // a cluster takes rows r, r + clusters, ...
  const S fill = N::store(-INFINITY);
  struct Part {  // this block's part of a row
    const S* x;
    int shift;
    int64_t begin, end, count;  // grid positions [begin, end), `count` vectors (none where past the row's end)
  };
  const auto part_of = [&](int64_t row) {
    Part p;
    p.x = x + row * n;
    p.shift = row_shift<S, V, kEdges>(p.x);
    set_part_bounds<V>(p, n, rank, part);
    return p;
  };
  // Vector j of a part into shared memory; every thread reads back only the vectors it copied.
  const auto copy = [&](const Part& p, int64_t j) {
    const int64_t i = p.begin + j * V - p.shift;
    if (!kEdges || (i >= 0 && i + V <= n)) {
      copy16_async(&stage[j], p.x + i);
    } else {
      stage[j] = load_vec<S, V, kEdges>(p.x, n, p.shift, p.begin + j * V, fill);
    }
  };
  int64_t row = blockIdx.x / blocks_per_row;
  Part now = part_of(row);
  if constexpr (kCopyAsync)
    for (int64_t j = threadIdx.x; j < now.count; j += kStagedThreads) copy(now, j);
  for (int parity = 0; row < rows; row += clusters, parity ^= 1) {
    const int64_t next_row = row + clusters;
    const Part next = kCopyAsync && next_row < rows ? part_of(next_row) : Part{x, 0, 0, 0, 0};
    C m = -INFINITY;
    if constexpr (kCopyAsync) {
      wait_async_copies();
      if constexpr (sizeof(S) == 2) {
        m = staged_max(stage, now.count);
      } else {
        for (int64_t j = threadIdx.x; j < now.count; j += kStagedThreads) {
          const Vec<S, V> q = stage[j];
#pragma unroll
          for (int k = 0; k < V; ++k) m = max_nan(m, N::load(q.v[k]));
        }
      }
    } else {
      for_each_vector<kStagedThreads, V, kStagedUnroll>(
          now.begin, now.end, [&](int64_t p) { return load_vec<S, V, kEdges>(now.x, n, now.shift, p, fill); },
          [&](int64_t p, const Vec<S, V>& q) {
            stage[(p - now.begin) / V] = q;
#pragma unroll
            for (int k = 0; k < V; ++k) m = max_nan(m, N::load(q.v[k]));
          });
    }
    // The block's own max and sum, then one exchange over the cluster for the row's (cluster_combine).
    m = block_reduce<kStagedThreads>(m, Max{}, scratch);
    const bool empty = m == -INFINITY;
    const C block_max = empty ? C(0) : m;  // a part of only -inf (or only fill) sums to 0, not NaN
    // float32 softmax keeps its terms exp(x - block_max) in place of x, and its writing pass scales them: one exp
    // an element instead of two (16-bit rows take exp2_flushed, two instructions). H100, ms, two exps -> one
    // (results/h100-2026-11-27/ab_kept_terms.log): 8192 x 32768 0.750 -> 0.729, 4096 x 131072 1.533 -> 1.493,
    // 8192 x 50257 1.200 -> 1.193, 4096 x 393216 4.68 -> 4.65; log_softmax's, which take one, as fast as these.
    const bool keep_terms = sizeof(S) == 4 && !log;
    C s = 0;
    for (int64_t j = threadIdx.x; j < now.count; j += kStagedThreads) {
      Vec<S, V> q = stage[j];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C term = exp_term<S>(N::load(q.v[k]) - block_max);  // -inf fill: exp gives 0
        s += term;
        q.v[k] = N::store(term);
      }
      if (keep_terms) stage[j] = q;
    }
    s = block_reduce<kStagedThreads>(s, Sum{}, scratch);
    if constexpr (kCluster) {
      // A row after the first: wait until every block has read the last exchange's slots (kArriveEarly: each
      // arrived there when done); otherwise the slots alternate, and the last row's sync kept the other pair.
      if (kArriveEarly && row >= clusters) __cluster_barrier_wait();
      cluster_combine<kArriveEarly, S>(m, s, slots[kArriveEarly ? 0 : parity]);
    }
    const ForwardOutput<S, C> output(s, log);
    // A kept term exp(x - block_max) times exp(block_max - max) / sum. A part of only -inf has terms of 0 and a
    // scale of 0 / sum: 0, or NaN where the whole row is -inf (sum 0), as the other outputs then. The rounded
    // block_max - max adds its own |block_max - max| ulp, within the |x - max| of the bound (docs/accuracy.md).
    const C kept_scale = empty ? C(0) / s : exp_(block_max - m) / s;
    S* yr = y + row * n;
    const int64_t last = kCopyAsync ? max(now.count, next.count) : now.count;
    for (int64_t j = threadIdx.x; j < last; j += kStagedThreads) {
      if (j < now.count) {
        const Vec<S, V> q = stage[j];
        store_vec<S, V, kEdges>(yr, n, now.shift, now.begin + j * V, [&](int k) {
          return keep_terms ? N::load(q.v[k]) * kept_scale : output(N::load(q.v[k]) - m);
        });
      }
      // The next row's vector j, copied where this row's was read: after the store that used its values.
      if constexpr (kCopyAsync)
        if (j < next.count) copy(next, j);
    }
    // Compiled as a loop, float32's one row a cluster ran slower (H100, 8192 x 50257 softmax 1.198 -> 1.493 ms:
    // results/h100-2026-11-27/staged_forward_registers.log).
    if constexpr (!kCopyAsync) break;
    now = next;
  }
  if constexpr (kCluster) cluster_exit_sync<kArriveEarly>();
}

// Built for three blocks an SM (40 registers), which parts of up to 64 KB allow: H100, softmax, ms, built for two
// -> three: bfloat16 4096 x 131072 0.824 -> 0.774, 16384 x 65536 1.643 -> 1.486
// (results/h100-2026-11-27/staged_forward_16bit_ab.log); float32 (48 registers for two) 4096 x 131072 1.615 ->
// 1.533, 8192 x 32768 0.762 -> 0.744 (staged_forward_registers.log).
// 16-bit rows: every whole vector of the part copied at once, without registers (cp.async), the edges by plain
// loads. Loaded through registers, 4 vectors a thread, a block kept only part of its part in flight: H100,
// bfloat16 softmax forward at 8192 x 32768 0.557 ms against 0.446, 8192 x 50257 0.904 against 0.759. float32 rows
// load through registers, one a cluster (copied so, 8192 x 32768 ran 0.920 ms against 0.849 and 4096 x 393216
// 6.34 against 6.09), except where the grid holds fewer clusters than there are rows: then they are copied, and
// taken in turn, as 16-bit rows are (staged_clusters).
template <class S, int V, bool kEdges, bool kCluster>
__global__ void __launch_bounds__(kStagedThreads, 3)
    staged_forward(const S* __restrict__ x, S* __restrict__ y, int64_t rows, int64_t n, int64_t part, bool log) {
  using C = typename Num<S>::C;
  __shared__ C scratch[32];
  __shared__ C slots[2][4];  // the exchanges', alternating between rows (see the exchange)
  constexpr bool kVectors16 = sizeof(Vec<S, V>) == 16;
  if constexpr (sizeof(S) == 2 && kVectors16) {
    staged_forward_rows<true, S, V, kEdges, kCluster>(x, y, rows, n, part, log, scratch, slots);
  } else if constexpr (sizeof(S) == 4 && kVectors16) {
    unsigned rank, blocks_per_row;
    cluster_position<kCluster>(rank, blocks_per_row);
    if (gridDim.x / blocks_per_row < rows) {
      staged_forward_rows<true, S, V, kEdges, kCluster>(x, y, rows, n, part, log, scratch, slots);
    } else {
      staged_forward_rows<false, S, V, kEdges, kCluster>(x, y, rows, n, part, log, scratch, slots);
    }
  } else {
    staged_forward_rows<false, S, V, kEdges, kCluster>(x, y, rows, n, part, log, scratch, slots);
  }
}

// As regs_backward: one read of each operand. The block stages its part of the operand it keeps (log_softmax: g,
// whose sum needs it alone; softmax: y) and reads the other one again in the second pass, softmax's g then from
// L2, where the cluster's parts of it still are. With `stage_both` (the plan's: where both fit) it stages y's
// part and g's: 16-bit ones copied by cp.async (every vector of both in flight, as the forward's), float32 ones
// through registers. Such clusters may take several rows in turn (staged_clusters: 16-bit ones of 8 blocks or more,
// float32 ones of parts that take a whole SM), copying the next row's vectors j into shared memory by cp.async once
// the writing pass has used this row's, as staged_forward does.
// The 16-bit kernels of clusters on the 16-byte grid are built for three blocks an SM (40 registers a thread), where
// parts of up to 74 KB fit three: H100, ms, two blocks -> three (results/h100-2026-11-27/ab_backward_3_blocks.log):
// bfloat16 softmax at 16384 x 65536 (4 blocks of 64 KB a row) 2.367 -> 2.248, log_softmax 2.427 -> 2.258, float16
// alike; 4096 x 131072 (8 blocks of 64 KB) 1.21 -> 1.21. Where a block takes a whole SM, bfloat16 ran 0.6-1.1 %
// slower (it spills 48 bytes at 40 registers; 4096 x 393216 3.614 -> 3.636), float16 within 0.5 %
// (ab_backward_3_blocks_whole_sm.log). The kernels with edge code spill 224 bytes at 40 registers: float16 at
// 16384 x 65543 ran 2.48 -> 3.46, so they keep two.
template <class S, int V, bool kEdges, bool kCluster>
__global__ void __launch_bounds__(kStagedThreads, sizeof(S) == 2 && kCluster && !kEdges ? 3 : 2)
    staged_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t rows, int64_t n,
                    int64_t part, bool log, bool stage_both) {
  using N = Num<S>;
  using C = typename N::C;
  constexpr int kUnroll = kStagedUnroll / 2;  // two operands: as many loads in flight as the forward, in 64 registers
  __shared__ C scratch[32];
  __shared__ C slots[2][2];  // the exchange's slot and result, alternating between rows taken in turn
  Vec<S, V>* stage = staged_vectors<S, V>();    // the kept operand's part; y's with stage_both
  Vec<S, V>* staged_grads = stage + part / V;  // g's part, with stage_both
  unsigned rank, blocks_per_row;
  cluster_position<kCluster>(rank, blocks_per_row);
  const S zero = N::store(C(0));
  struct Operands {
    Vec<S, V> g, y;
  };
  // The sum's term of one vector: log_softmax sum(g), softmax sum(g y).
  const auto add = [&](C& d, const Operands& q) {
#pragma unroll
    for (int k = 0; k < V; ++k) d += log ? N::load(q.g.v[k]) : N::load(q.g.v[k]) * N::load(q.y.v[k]);
  };
  const auto store_at = [&](int64_t offset, int shift, int64_t p, const Operands& q, C d) {
    store_vec<S, V, kEdges>(gi + offset, n, shift, p, [&](int k) {
      const C gk = N::load(q.g.v[k]), yk = N::load(q.y.v[k]);
      return log ? gk - exp_for<S>(yk) * d : yk * (gk - d);
    });
  };
  // 16-bit parts are copied by cp.async, one row a cluster or several; float32 ones where rows are taken in turn
  // (staged_clusters: parts of a whole SM), and otherwise loaded through registers. (The test of float32's rows
  // stays out of the 16-bit kernels: computed before the branch for them too, it made the bfloat16 backward at
  // 8192 x 50257 2.5 % slower.)
  constexpr bool kCopyAsync = sizeof(S) == 2 && sizeof(Vec<S, V>) == 16;
  constexpr bool kFloatCopies = sizeof(S) == 4 && sizeof(Vec<S, V>) == 16;
  if (stage_both && (kCopyAsync || (kFloatCopies && gridDim.x / blocks_per_row < rows))) {
    const int64_t clusters = gridDim.x / blocks_per_row;  // a cluster takes rows r, r + clusters, ...
    const bool in_turn = clusters < rows;                  // the same in every block of the cluster
    struct Part {  // this block's part of a row
      int64_t offset;
      int shift;
      int64_t begin, end, count;  // grid positions [begin, end), `count` vectors (none where past the row's end)
    };
    const auto part_of = [&](int64_t row) {
      Part p;
      p.offset = row * n;
      p.shift = row_shift<S, V, kEdges>(g + p.offset);
      set_part_bounds<V>(p, n, rank, part);
      return p;
    };
    // Vector j of the part of y and of g into shared memory; every thread reads back only the vectors it copied.
    const auto copy = [&](const Part& p, int64_t j) {
      const int64_t i = p.begin + j * V - p.shift;
      if (!kEdges || (i >= 0 && i + V <= n)) {
        copy16_async(&stage[j], y + p.offset + i);
        copy16_async(&staged_grads[j], g + p.offset + i);
      } else {
        stage[j] = load_vec<S, V, kEdges>(y + p.offset, n, p.shift, p.begin + j * V, zero);
        staged_grads[j] = load_vec<S, V, kEdges>(g + p.offset, n, p.shift, p.begin + j * V, zero);
      }
    };
    int64_t row = blockIdx.x / blocks_per_row;
    Part now = part_of(row);
    for (int64_t j = threadIdx.x; j < now.count; j += kStagedThreads) copy(now, j);
    for (int parity = 0; row < rows; row += clusters, parity ^= 1) {
      const int64_t next_row = row + clusters;
      const Part next = next_row < rows ? part_of(next_row) : Part{0, 0, 0, 0, 0};
      wait_async_copies();
      C d = 0;
      for (int64_t j = threadIdx.x; j < now.count; j += kStagedThreads) add(d, Operands{staged_grads[j], stage[j]});
      d = block_reduce<kStagedThreads>(d, Sum{}, scratch);
      if constexpr (kCluster) {
        // One row a cluster: the blocks arrive at the exit barrier as soon as they have read the others' slots.
        // Rows in turn: the slots alternate, and the last row's sync kept the other pair (see cluster_combine).
        d = in_turn ? cluster_reduce<false>(d, Sum{}, &slots[parity][0], &slots[parity][1])
                    : cluster_reduce<true>(d, Sum{}, &slots[0][0], &slots[0][1]);
      }
      const int64_t last = max(now.count, next.count);
      for (int64_t j = threadIdx.x; j < last; j += kStagedThreads) {
        if (j < now.count) store_at(now.offset, now.shift, now.begin + j * V, Operands{staged_grads[j], stage[j]}, d);
        if (j < next.count) copy(next, j);  // after the store that used this row's vector j
      }
      now = next;
    }
    if constexpr (kCluster) {
      if (in_turn) {
        cluster_exit_sync<false>();
      } else {
        cluster_exit_sync<true>();
      }
    }
    return;
  }
  // One row a block or cluster, as the grid gives them.
  const int64_t offset = static_cast<int64_t>(blockIdx.x / blocks_per_row) * n;
  const int shift = row_shift<S, V, kEdges>(g + offset);
  const int64_t begin = rank * part, end = min(n + shift, begin + part);
  const auto store = [&](int64_t p, const Operands& q, C d) { store_at(offset, shift, p, q, d); };
  C d = 0;
  for_each_vector<kStagedThreads, V, kUnroll>(
      begin, end,
      [&](int64_t p) {
        Operands q;
        q.g = load_vec<S, V, kEdges>(g + offset, n, shift, p, zero);
        if (stage_both || !log) q.y = load_vec<S, V, kEdges>(y + offset, n, shift, p, zero);
        return q;
      },
      [&](int64_t p, const Operands& q) {
        const int64_t j = (p - begin) / V;
        if (stage_both) {
          stage[j] = q.y;
          staged_grads[j] = q.g;
        } else {
          stage[j] = log ? q.g : q.y;
        }
        add(d, q);
      });
  d = RowReduce<kStagedThreads, kCluster>::run(d, Sum{}, scratch, &slots[0][0], &slots[0][1]);
  // Two loops, each as it ran fastest: with both staged, both shared-memory reads in the first lambda; with one,
  // the global read there and the staged operand's read beside its use (the float32 log_softmax backward ran 6-7 %
  // slower with both reads first, at 8192 x 32768 and 4096 x 131072 ... 393216).
  if (stage_both) {
    for_each_vector<kStagedThreads, V, kUnroll>(
        begin, end, [&](int64_t p) { return Operands{staged_grads[(p - begin) / V], stage[(p - begin) / V]}; },
        [&](int64_t p, const Operands& q) { store(p, q, d); });
  } else {
    const S* other = (log ? y : g) + offset;
    for_each_vector<kStagedThreads, V, kUnroll>(
        begin, end, [&](int64_t p) { return load_vec<S, V, kEdges>(other, n, shift, p, zero); },
        [&](int64_t p, const Vec<S, V>& o) {
          const Vec<S, V> kept = stage[(p - begin) / V];
          store(p, log ? Operands{kept, o} : Operands{o, kept}, d);
        });
  }
  if constexpr (kCluster) cluster_exit_sync<true>();
}

// ---------------------------------------------------------------------------------------------------------------
// Long rows: block b works on part b % parts of row b / parts, grid positions [part * chunk, (part + 1) * chunk)
// (see load_vec; `chunk` a multiple of V).

constexpr int kSplitThreads = 512;
// split_in_steps: taken where a call's operands are over kStepsMinBytes (beyond what L2 keeps between the two
// kernels' passes) and a row's over kStepsMinRowBytes (fewer, longer parts); a step holds kStepBytes of rows, a third
// of the H100's 50 MB L2.
constexpr int64_t kStepsMinBytes = 64ll << 20, kStepsMinRowBytes = 1 << 20, kStepBytes = 16ll << 20;

// Online (max, sum of exp(x - max)) over V values.
template <class S, class C>
__device__ __forceinline__ void online_add(C& m, C& s, const C* v, int count) {
  C vm = v[0];
  for (int k = 1; k < count; ++k) vm = max_nan(vm, v[k]);
  const C nm = max_nan(m, vm);
  if (nm == -INFINITY) return;  // nothing but -inf so far: the sum stays 0
  s *= exp_term<S>(m - nm);  // 0 while m was -inf
  for (int k = 0; k < count; ++k) s += exp_term<S>(v[k] - nm);
  m = nm;
}

// (M, S) of pairs (m, s): M = max m, S = sum s * exp(m - M), across the block.
template <class C>
__device__ __forceinline__ void block_merge(C& m, C& s, C* scratch) {
  const C big = block_reduce<kSplitThreads>(m, Max{}, scratch);
  s = block_reduce<kSplitThreads>(rescaled_sum<C>(m, s, big), Sum{}, scratch);  // exp_, in C's precision
  m = big;
}

// The cache hints of split_in_steps' passes (kHinted; none for the two kernels'): the partial pass's reads are kept
// in L2 for the apply pass, whose reads and writes are the lines' last use.
template <bool kHinted>
constexpr int kPartialHint = kHinted ? kKeepInL2 : kNoHint;
template <bool kHinted>
constexpr int kApplyHint = kHinted ? kLastUse : kNoHint;

// One block's part of the two passes, for the kernels below: the partial pass of row `row`, part `part`, writes its
// result into row_work[part] (forward: a (max, sum) pair, two values; backward: one sum); the apply pass combines
// row_work[0 .. parts) and writes the part's output. Every block of a row combines the same values in the same
// order, so all get the same bits.
template <class S, int V, bool kEdges, bool kHinted>
__device__ __forceinline__ void forward_partial_part(const S* __restrict__ x, int64_t row, int64_t part, int64_t n,
                                                     int64_t chunk, typename Num<S>::C* row_work,
                                                     typename Num<S>::C* scratch) {
  using N = Num<S>;
  using C = typename N::C;
  const S* xr = x + row * n;
  const int shift = row_shift<S, V, kEdges>(xr);
  const int64_t begin = part * chunk, end = min(n + shift, begin + chunk);
  const S fill = N::store(-INFINITY);
  C m = -INFINITY, s = 0;
  constexpr int kUnroll = 4;  // loads in flight per thread
  for_each_vector<kSplitThreads, V, kUnroll>(
      begin, end, [&](int64_t p) { return load_vec<S, V, kEdges, kPartialHint<kHinted>>(xr, n, shift, p, fill); },
      [&](int64_t, const Vec<S, V>& q) {
        C v[V];
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = N::load(q.v[k]);
        online_add<S>(m, s, v, V);
      });
  block_merge(m, s, scratch);
  if (threadIdx.x == 0) {
    row_work[part * 2] = m;
    row_work[part * 2 + 1] = s;
  }
}

template <class S, int V, bool kEdges, bool kHinted>
__device__ __forceinline__ void forward_apply_part(const S* __restrict__ x, S* __restrict__ y, int64_t row,
                                                   int64_t part, int64_t n, int64_t chunk, int64_t parts,
                                                   const typename Num<S>::C* row_work, bool log,
                                                   typename Num<S>::C* scratch) {
  using N = Num<S>;
  using C = typename N::C;
  // Read from L2 (__ldcg), past this SM's L1: split_in_steps' blocks wrote them after a barrier, into lines that
  // this block may have read two steps before.
  C m = -INFINITY, s = 0;
  if (threadIdx.x < parts) {
    m = __ldcg(row_work + threadIdx.x * 2);
    s = __ldcg(row_work + threadIdx.x * 2 + 1);
  }
  block_merge(m, s, scratch);
  const ForwardOutput<S, C> output(s, log);
  const S* xr = x + row * n;
  S* yr = y + row * n;
  const int shift = row_shift<S, V, kEdges>(xr);
  const int64_t begin = part * chunk, end = min(n + shift, begin + chunk);
  for (int64_t p = begin + threadIdx.x * V; p < end; p += kSplitThreads * V) {
    const Vec<S, V> q = load_vec<S, V, kEdges, kApplyHint<kHinted>>(xr, n, shift, p, N::store(C(0)));
    store_vec<S, V, kEdges, kApplyHint<kHinted>>(yr, n, shift, p,
                                                 [&](int k) { return output(N::load(q.v[k]) - m); });
  }
}

template <class S, int V, bool kEdges, bool kHinted>
__device__ __forceinline__ void backward_partial_part(const S* __restrict__ g, const S* __restrict__ y, int64_t row,
                                                      int64_t part, int64_t n, int64_t chunk, bool log,
                                                      typename Num<S>::C* row_work, typename Num<S>::C* scratch) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t offset = row * n;
  const int shift = row_shift<S, V, kEdges>(g + offset);
  const int64_t begin = part * chunk, end = min(n + shift, begin + chunk);
  const S zero = N::store(C(0));
  C d = 0;
  for (int64_t p = begin + threadIdx.x * V; p < end; p += kSplitThreads * V) {
    const Vec<S, V> pg = load_vec<S, V, kEdges, kPartialHint<kHinted>>(g + offset, n, shift, p, zero);
    if (log) {
#pragma unroll
      for (int k = 0; k < V; ++k) d += N::load(pg.v[k]);
    } else {
      const Vec<S, V> py = load_vec<S, V, kEdges, kPartialHint<kHinted>>(y + offset, n, shift, p, zero);
#pragma unroll
      for (int k = 0; k < V; ++k) d += N::load(pg.v[k]) * N::load(py.v[k]);
    }
  }
  d = block_reduce<kSplitThreads>(d, Sum{}, scratch);
  if (threadIdx.x == 0) row_work[part] = d;
}

template <class S, int V, bool kEdges, bool kHinted>
__device__ __forceinline__ void backward_apply_part(const S* __restrict__ g, const S* __restrict__ y,
                                                    S* __restrict__ gi, int64_t row, int64_t part, int64_t n,
                                                    int64_t chunk, int64_t parts, const typename Num<S>::C* row_work,
                                                    bool log, typename Num<S>::C* scratch) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t offset = row * n;
  C d = threadIdx.x < parts ? __ldcg(row_work + threadIdx.x) : C(0);  // from L2, as forward_apply_part's
  d = block_reduce<kSplitThreads>(d, Sum{}, scratch);
  const int shift = row_shift<S, V, kEdges>(g + offset);
  const int64_t begin = part * chunk, end = min(n + shift, begin + chunk);
  const S zero = N::store(C(0));
  for (int64_t p = begin + threadIdx.x * V; p < end; p += kSplitThreads * V) {
    const Vec<S, V> pg = load_vec<S, V, kEdges, kApplyHint<kHinted>>(g + offset, n, shift, p, zero);
    const Vec<S, V> py = load_vec<S, V, kEdges, kApplyHint<kHinted>>(y + offset, n, shift, p, zero);
    store_vec<S, V, kEdges, kApplyHint<kHinted>>(gi + offset, n, shift, p, [&](int k) {
      const C gk = N::load(pg.v[k]), yk = N::load(py.v[k]);
      return log ? gk - exp_for<S>(yk) * d : yk * (gk - d);
    });
  }
}

// A part's result: the backward's sum, or the forward's (max, sum) pair.
template <bool kBackward>
constexpr int64_t kPartValues = kBackward ? 1 : 2;

// Either direction's partial and apply passes over one part (a = x, or a = g and b = y).
template <class S, int V, bool kEdges, bool kBackward, bool kHinted>
__device__ __forceinline__ void partial_part(const S* a, const S* b, int64_t row, int64_t part, int64_t n,
                                             int64_t chunk, bool log, typename Num<S>::C* row_work,
                                             typename Num<S>::C* scratch) {
  if constexpr (kBackward) {
    backward_partial_part<S, V, kEdges, kHinted>(a, b, row, part, n, chunk, log, row_work, scratch);
  } else {
    forward_partial_part<S, V, kEdges, kHinted>(a, row, part, n, chunk, row_work, scratch);
  }
}

template <class S, int V, bool kEdges, bool kBackward, bool kHinted>
__device__ __forceinline__ void apply_part(const S* a, const S* b, S* out, int64_t row, int64_t part, int64_t n,
                                           int64_t chunk, int64_t parts, const typename Num<S>::C* row_work,
                                           bool log, typename Num<S>::C* scratch) {
  if constexpr (kBackward) {
    backward_apply_part<S, V, kEdges, kHinted>(a, b, out, row, part, n, chunk, parts, row_work, log, scratch);
  } else {
    forward_apply_part<S, V, kEdges, kHinted>(a, out, row, part, n, chunk, parts, row_work, log, scratch);
  }
}

// The two passes as two kernels over every row at once: block b takes part b % parts of row b / parts. The second
// finds in L2 what is left there of the first's reads.
template <class S, int V, bool kEdges, bool kBackward>
__global__ void __launch_bounds__(kSplitThreads)
    split_partial(const S* __restrict__ a, const S* __restrict__ b, int64_t n, int64_t chunk, int64_t parts, bool log,
                  typename Num<S>::C* __restrict__ work) {
  __shared__ typename Num<S>::C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts;
  partial_part<S, V, kEdges, kBackward, false>(a, b, row, part, n, chunk, log,
                                               work + row * parts * kPartValues<kBackward>, scratch);
}

template <class S, int V, bool kEdges, bool kBackward>
__global__ void __launch_bounds__(kSplitThreads)
    split_apply(const S* __restrict__ a, const S* __restrict__ b, S* __restrict__ out, int64_t n, int64_t chunk,
                int64_t parts, const typename Num<S>::C* __restrict__ work, bool log) {
  __shared__ typename Num<S>::C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts;
  apply_part<S, V, kEdges, kBackward, false>(a, b, out, row, part, n, chunk, parts,
                                             work + row * parts * kPartValues<kBackward>, log, scratch);
}

// The two passes in one cooperative grid, a step of `step_rows` rows at a time: block b takes part b % parts of row
// b / parts of each step, and the grid meets at a barrier between the passes, so that the apply pass reads the
// step's rows while L2 still holds them: the partial pass's reads ask L2 to keep their lines (evict_last), the apply
// pass's reads and writes are their lines' last use (evict_first). The step's partial results go to one of two
// halves of `work` by the step's parity: a block still applying step s reads its half while others write step
// s + 1's into the other, and no block writes step s + 2's before all have passed step s + 1's barrier. Two blocks
// an SM (the __launch_bounds__ hold them to 64 registers), so every GPU holds the grid at once.
// H100, ms, the two kernels -> this (results/h100-2026-11-28/steps_plans.log): 64 x 4194304 float32 softmax
// forward 1.210 -> 1.101, backward 1.988 -> 1.644, log_softmax backward 1.580 -> 1.307; bfloat16 forward 0.672 ->
// 0.591, backward 1.031 -> 0.781; 128 x 2097152 float32 backward 1.932 -> 1.534; 32 x 4194304 float16 backward
// 0.514 -> 0.391. Without the hints (steps_plans_unhinted.log) it gained half as much (float32 forward 1.160,
// backward 1.896), and float64, which spills at 64 registers, ran slower (512 x 393216 forward 2.040 -> 2.349):
// float64 keeps the two kernels.
template <class S, int V, bool kEdges, bool kBackward>
__global__ void __launch_bounds__(kSplitThreads, 2)
    split_in_steps(const S* __restrict__ a, const S* __restrict__ b, S* __restrict__ out, int64_t rows, int64_t n,
                   int64_t chunk, int64_t parts, int64_t step_rows, bool log, typename Num<S>::C* __restrict__ work) {
  __shared__ typename Num<S>::C scratch[32];
  const int64_t in_step = blockIdx.x / parts, part = blockIdx.x % parts;
  cg::grid_group grid = cg::this_grid();
  for (int64_t first = 0, step = 0; first < rows; first += step_rows, ++step) {
    const int64_t row = first + in_step;
    typename Num<S>::C* row_work = work + ((step & 1) * step_rows + in_step) * parts * kPartValues<kBackward>;
    if (row < rows) {
      partial_part<S, V, kEdges, kBackward, true>(a, b, row, part, n, chunk, log, row_work, scratch);
    }
    grid.sync();
    if (row < rows) {
      apply_part<S, V, kEdges, kBackward, true>(a, b, out, row, part, n, chunk, parts, row_work, log, scratch);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Columns (inner > 1): thread (o, i) reduces the V neighbouring columns x[o, :, i V .. i V + V), one V-wide access a
// row; neighbouring threads read neighbouring columns. V is 16 bytes of columns where the columns are short
// (column_vector), else 1. A short column's single-element loads leave too little in flight: H100, softmax over
// dim 1 of 131072 x 2 x 1024 (results/h100-2026-11-27/short_n_plans.log), one column a thread against 16 bytes:
// float32 forward 1.383 ms against 0.776, bfloat16 1.154 against 0.490, log_softmax forward 1.434 (torch 0.988)
// against 0.785. Longer columns ran faster in one column a thread (float32 forward at n = 8: 0.781 against 1.057).

constexpr int kColumnThreads = 256;
constexpr int64_t kThreadsAnSM = 2048;  // an SM's resident threads (sm_80, sm_90; 1536 on sm_86, sm_89)
// Rows a backward thread has in flight at once. H100, over dim 1 (short_n_plans2.log against short_n_plans.log):
// bfloat16 softmax backward at n = 8 0.870 ms against 0.533 in 16-byte columns, 16 x 16384 x 1024 13.5 against 5.4;
// the forwards' online pass ran slower so (float32 at n = 2 0.776 against 0.961, bfloat16 0.490 against 0.834).
constexpr int kColumnUnroll = 4;

// The V elements base[index], base[index + 1], ... of this thread's columns (in memory or in a tile): one V-wide
// access.
template <class S, int V>
__device__ __forceinline__ Vec<S, V>& columns_at(S* base, int64_t index) {
  return *reinterpret_cast<Vec<S, V>*>(base + index);
}
template <class S, int V>
__device__ __forceinline__ const Vec<S, V>& columns_at(const S* base, int64_t index) {
  return *reinterpret_cast<const Vec<S, V>*>(base + index);
}

// A column's online max m and sum s of exp(v - m), the sum compensated (Kahan: `lost` holds what its additions
// rounded away): a column adds its n terms one by one, and a plain sum's error grows with n (float64 log_softmax
// over dim 0 of [600, 305] was 34 eps off, past the tests' bound of 32.5); the compensated one stays within a few
// ulp. The terms are in [0, 1] or NaN, so no infinity enters the compensation. Branch-free, as the plain loop was:
// with a branch around the rescaling (taken only when the max grows) the 1024 x 1024 x 1024 forward over dim 1 ran
// 11-31 % slower.
template <class S>
struct OnlineSum {
  using C = typename Num<S>::C;
  C m = -INFINITY, s = 0, lost = 0;
  __device__ __forceinline__ void add(C v) {
    const C nm = max_nan(m, v);
    const bool none = nm == -INFINITY;  // nothing but -inf so far: the sum stays 0
    // 1 while the max stays, 0 while m was -inf, NaN after a NaN.
    const C rescale = none ? C(1) : exp_term<S>(m - nm);
    const C kept = s * rescale;
    const C term = (none ? C(0) : exp_term<S>(v - nm)) - lost * rescale;
    const C sum = kept + term;
    lost = (sum - kept) - term;
    s = sum;
    m = nm;
  }
  // The sum rescaled to a larger max: 0 where nothing but -inf was added, NaN where max or m is NaN or both +inf.
  __device__ __forceinline__ C sum_at(C max) const { return m == -INFINITY ? C(0) : (s - lost) * exp_term<S>(m - max); }
};

// Element 0 of thread t's first column: outer index t / (inner / V), columns (t % (inner / V)) V on.
template <int V>
__device__ __forceinline__ int64_t column_offset(int64_t t, int64_t n, int64_t inner) {
  const int64_t vectors = inner / V;
  return (t / vectors) * n * inner + (t % vectors) * V;
}

// The columns forward holds a column of at most kRows rows in registers: every column where a thread has 16 bytes
// of them (V > 1; column_vector gives the forward no longer ones, and kRows is the least of 2, 4 and V that holds
// the column, so that a short column takes few registers), columns of at most 8 where it has one. The sum of
// their terms is plain: at most 8 terms in [0, 1], one of them 1, it errs by at most 7 ulp of the compute type.
template <class S, int V, int kRows>
__global__ void __launch_bounds__(kColumnThreads)
    columns_forward(const S* __restrict__ x, S* __restrict__ y, int64_t outer, int64_t n, int64_t inner, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (t >= outer * (inner / V)) return;
  const int64_t offset = column_offset<V>(t, n, inner);
  const auto row = [&](int64_t j) { return columns_at<S, V>(x, offset + j * inner); };
  if (V > 1 || n <= kRows) {
    // The column in registers: its max, then the sum of exp(v - max), then the output: one exponential an element
    // for the sum where the online sum takes two.
    Vec<S, V> held[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      if (j < n) held[j] = row(j);
    }
    C m[V], s[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      m[k] = -INFINITY;
      s[k] = 0;
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
#pragma unroll
      for (int k = 0; k < V; ++k) m[k] = j < n ? max_nan(m[k], N::load(held[j].v[k])) : m[k];
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
#pragma unroll
      for (int k = 0; k < V; ++k) {  // a column of -inf sums NaN (-inf - -inf), and gives NaN, as torch's
        if (j < n) s[k] += exp_term<S>(N::load(held[j].v[k]) - m[k]);
      }
    }
    ForwardOutput<S, C> output[V];
#pragma unroll
    for (int k = 0; k < V; ++k) output[k] = ForwardOutput<S, C>(s[k], log);
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      if (j >= n) break;
      Vec<S, V> y_j;
#pragma unroll
      for (int k = 0; k < V; ++k) y_j.v[k] = N::store(output[k](N::load(held[j].v[k]) - m[k]));
      columns_at<S, V>(y, offset + j * inner) = y_j;
    }
    return;
  }
  OnlineSum<S> sums[V];
  for (int64_t j = 0; j < n; ++j) {
    const Vec<S, V> x_j = row(j);
#pragma unroll
    for (int k = 0; k < V; ++k) sums[k].add(N::load(x_j.v[k]));
  }
  ForwardOutput<S, C> output[V];
#pragma unroll
  for (int k = 0; k < V; ++k) output[k] = ForwardOutput<S, C>(sums[k].s, log);
  for (int64_t j = 0; j < n; ++j) {
    const Vec<S, V> x_j = row(j);
    Vec<S, V> y_j;
#pragma unroll
    for (int k = 0; k < V; ++k) y_j.v[k] = N::store(output[k](N::load(x_j.v[k]) - sums[k].m));
    columns_at<S, V>(y, offset + j * inner) = y_j;
  }
}

template <class S, int V>
__global__ void __launch_bounds__(kColumnThreads)
    columns_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t outer, int64_t n,
                     int64_t inner, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (t >= outer * (inner / V)) return;
  const int64_t offset = column_offset<V>(t, n, inner);
  // (g, y) at row j; log_softmax's sum takes g alone.
  struct Rows {
    Vec<S, V> g, y;
  };
  const auto g_row = [&](int64_t j) { return Rows{columns_at<S, V>(g, offset + j * inner), {}}; };
  const auto both_rows = [&](int64_t j) {
    return Rows{columns_at<S, V>(g, offset + j * inner), columns_at<S, V>(y, offset + j * inner)};
  };
  C d[V] = {};
  if (log) {
    for_each_strided<kColumnUnroll>(0, n, 1, g_row, [&](int64_t, const Rows& r) {
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] += N::load(r.g.v[k]);
    });
  } else {
    for_each_strided<kColumnUnroll>(0, n, 1, both_rows, [&](int64_t, const Rows& r) {
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] += N::load(r.g.v[k]) * N::load(r.y.v[k]);
    });
  }
  for_each_strided<kColumnUnroll>(0, n, 1, both_rows, [&](int64_t j, const Rows& r) {
    Vec<S, V> gi_j;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C gk = N::load(r.g.v[k]), yk = N::load(r.y.v[k]);
      gi_j.v[k] = N::store(log ? gk - exp_for<S>(yk) * d[k] : yk * (gk - d[k]));
    }
    columns_at<S, V>(gi, offset + j * inner) = gi_j;
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Columns in tiles: a block holds `width` neighbouring columns of one outer index, all n elements of each, in
// shared memory. It reads the tile once, reduces it there column by column and writes it once, where the columns
// kernels above read every element twice: their second pass found nothing left in L2 (H100, softmax over dim 1
// of 1024 x 1024 x 1024 float32: 60 % of the floor forward, 55 % backward). Thread (group, column) takes the
// column's rows group, group + groups, ...: a warp reads neighbouring columns of a row, or neighbouring elements
// of the contiguous [n, inner] slab where width = inner. A thread reads back only what it staged, so the tile
// needs no barrier; the groups' partial results meet in `partial`. plan_columns picks the width.

// Threads a block: 384 where three tiles fit an SM's shared memory (a tile of at most kTileBytes), 512 where one or
// two do. Registers decide it (ptxas, sm_90): the float32 forward holds 54 a thread in blocks of 512 and 46 in
// blocks of 384, the float32 and 16-bit backwards 62-64 and 54-56, so that three blocks of 384 run an SM where two of
// 512 did. Where shared memory holds two blocks or one, 512 threads keep more loads in flight (the 128 KB tile of
// softmax's float32 backward over dim 1 of 1024^3: 6.53 ms in 512, 6.84 in 384). H100, 512 threads against the
// plan (results/h100-2026-11-27/tile_threads.log), over dim 1 of 1024^3 (64 KB tiles): float32 softmax forward
// 4.28 -> 3.78 ms, log_softmax forward 4.14 -> 3.73, float64 softmax forward 10.08 -> 8.79, bfloat16 softmax
// backward 3.84 -> 3.67, log_softmax backward 3.38 -> 3.22; 2048 x 2048 x 8 float32 forward 0.151 -> 0.133. (A
// minimum of 3 blocks an SM in __launch_bounds__ held 512 threads to 40 registers, which spilled: bfloat16
// log_softmax backward 3.39 -> 4.44.)
constexpr int kTileThreadsThree = 384, kTileThreadsFew = 512;
constexpr int kTileUnroll = 8;
constexpr int kTileMinWidth = 8;  // at most kThreads / 8 groups' partials to combine a column
constexpr int64_t kTileMinRows = 512;
constexpr int64_t kShortTileBytes = 64 * 1024, kShortTileMinBytes = 16 * 1024;  // columns shorter (plan_columns)
constexpr int64_t kTileBytes = 72 * 1024;  // three blocks in an H100 SM's 228 KB

// A thread's place in a tile: V neighbouring columns, `lane` of the `lanes` threads across the tile's width, rows
// group, group + groups, ... A tile's copies and its reductions place threads each their own way (see
// tiles_forward).
struct TilePosition {
  int64_t offset;   // of this thread's first column's element 0
  int column, lane, lanes, group, groups;
  bool active;      // columns of the tile (an outer index's last tile may be narrower than width)
  // threads: the block's, a compile-time constant (kThreads). The compiled code depends on it: with blockDim.x
  // instead, 16 x 4096 x 4096 float32 softmax forward ran 1.86 ms against 1.53 (H100).
  __device__ TilePosition(int64_t n, int64_t inner, int width, int64_t tiles, int threads, int columns_a_thread) {
    const int64_t outer = blockIdx.x / tiles, first = (blockIdx.x % tiles) * static_cast<int64_t>(width);
    lanes = width / columns_a_thread;
    lane = threadIdx.x % lanes;
    column = lane * columns_a_thread;
    offset = outer * n * inner + first + column;
    group = threadIdx.x / lanes;
    groups = threads / lanes;
    active = group < groups && column < inner - first;
  }
};

template <class S>
__device__ __forceinline__ S* tile_memory() {
  extern __shared__ __align__(16) unsigned char tile_memory_bytes[];
  return reinterpret_cast<S*>(tile_memory_bytes);
}

// The groups' sums of a column: compensated where the result has the sum's precision (a float64 split forward's
// plain sum of 64 groups was 1.1x past the tests' bound); a 16-bit result's float sum is plain (compensated, the
// bfloat16 log_softmax forward over dim 1 of 1024^3 in tiles ran 1.615 ms against 1.536).
struct CompensatedSum {};
template <class S>
using GroupSum = std::conditional_t<sizeof(S) == 2, Sum, CompensatedSum>;

// The column's result from every group's partial result v, combined in the same order in all its threads.
template <class C, class Op>
__device__ __forceinline__ C combine_groups(C v, Op op, C* partial, const TilePosition& at) {
  partial[threadIdx.x] = v;  // threadIdx.x = group * lanes + lane
  __syncthreads();
  C r = partial[at.lane];
  if constexpr (std::is_same_v<Op, CompensatedSum>) {  // as OnlineSum
    C lost = 0;
    for (int k = 1; k < at.groups; ++k) {
      const C term = partial[k * at.lanes + at.lane] - lost;
      const C sum = r + term;
      lost = (sum - r) - term;
      r = sum;
    }
  } else {
    for (int k = 1; k < at.groups; ++k) r = op(r, partial[k * at.lanes + at.lane]);
  }
  __syncthreads();
  return r;
}
template <class C, int V, class Op>
__device__ __forceinline__ void combine_groups(Vec<C, V>& v, Op op, C* partial, const TilePosition& at) {
#pragma unroll
  for (int k = 0; k < V; ++k) v.v[k] = combine_groups(v.v[k], op, partial, at);
}

// A Vec of V copies of value. (Filling the float32 forward's max with a loop of its own instead left ptxas using 39
// registers a thread where it had used 46, and the kernel ran 6 % slower: H100, over dim 1 of 1024^3, 4.00 ms
// against 3.78.)
template <class C, int V>
__device__ __forceinline__ Vec<C, V> filled(C value) {
  Vec<C, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = value;
  return r;
}

// Copies the tile's columns of `source` ([outer, n, inner]) into `tile` (n rows of width), kChunk columns a copy
// (at.lanes copies across a row). 16-byte chunks go by cp.async, which keeps the whole tile in flight at once;
// narrower ones through registers, kTileUnroll loads in flight a thread. tile_copied() then waits for the block's.
template <class S, int kChunk>
__device__ __forceinline__ void copy_tile(S* tile, const S* source, const TilePosition& at, int64_t n, int64_t inner,
                                          int width) {
  if (!at.active) return;
  if constexpr (kChunk * sizeof(S) == 16) {
    for (int64_t j = at.group; j < n; j += at.groups)
      copy16_async(tile + j * width + at.column, source + at.offset + j * inner);
  } else {
    for_each_strided<kTileUnroll>(
        at.group, n, at.groups, [&](int64_t j) { return columns_at<S, kChunk>(source, at.offset + j * inner); },
        [&](int64_t j, const Vec<S, kChunk>& v) { columns_at<S, kChunk>(tile + at.column, j * width) = v; });
  }
}
__device__ __forceinline__ void tile_copied() {
  wait_async_copies();
  __syncthreads();
}

// Columns a thread in a tile's reductions: two for the 16-bit types where its copies are at least that wide (one
// 4-byte access where two 2-byte ones were; results/h100-2026-11-27/tile_columns.log: bfloat16 softmax forward over
// dim 1 of 1024^3 2.49 ms against 4.54), else one.
template <class S, int kChunk>
constexpr int kReducedColumns = sizeof(S) == 2 && kChunk >= 2 ? 2 : 1;

// The forward in tiles: the tile is copied in kChunk-column chunks (copy_tile), the column's max and compensated
// sum are taken from shared memory by threads of V columns (combine_groups), and the output written in chunks
// again: 16-byte chunks where the columns allow them (tile_chunk). Where a chunk is V columns, a thread writes the
// columns it reduced; otherwise the maxima and sums pass through `partial`.
// Why 16-byte chunks: a column's 4-byte loads kept 16 KB of a block's tile in flight (512 threads x 8), and over dim
// 1 of 1024^3 the float32 forward ran 3.76 ms, 75 % of the floor, where copying the same tiles (1024 rows of 64
// bytes, three blocks an SM) by cp.async ran at 93 % of a plain copy (tools/tile_copy_bandwidth.cu,
// results/h100-2026-11-27/tile_copy_4096.log). Chunked: 3.06 ms; bfloat16 2.39 -> 1.68 (ab_tile_chunks.log).
// Tried for the 16-bit forwards, slower: 512 threads (1.68 -> 2.00 ms) and four columns a thread in the
// reductions (2.12; ab_tile_chunks_16bit.log).
template <class S, int kThreads, int kChunk>
__global__ void __launch_bounds__(kThreads)
    tiles_forward(const S* __restrict__ x, S* __restrict__ y, int64_t n, int64_t inner, int width, int64_t tiles,
                  bool log) {
  constexpr int V = kReducedColumns<S, kChunk>;
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C partial[kThreads];
  S* tile = tile_memory<S>();
  const TilePosition chunk(n, inner, width, tiles, kThreads, kChunk), at(n, inner, width, tiles, kThreads, V);
  copy_tile<S, kChunk>(tile, x, chunk, n, inner, width);
  tile_copied();
  Vec<C, V> m = filled<C, V>(-INFINITY);
  if constexpr (sizeof(S) == 2 && V == 2) {
    // A column pair's max by one packed instruction a row (HMNMX2 with .NAN; see staged_max).
    using Pair = PairOf<S>;
    Pair pair_max;
    pair_max.x = pair_max.y = N::store(-INFINITY);
    if (at.active)
      for (int64_t j = at.group; j < n; j += at.groups)
        pair_max = __hmax2_nan(pair_max, *reinterpret_cast<const Pair*>(tile + j * width + at.column));
    m.v[0] = N::load(pair_max.x);
    m.v[1] = N::load(pair_max.y);
  } else if (at.active) {
    for (int64_t j = at.group; j < n; j += at.groups) {
      const Vec<S, V> v = columns_at<S, V>(tile, j * width + at.column);
#pragma unroll
      for (int k = 0; k < V; ++k) m.v[k] = max_nan(m.v[k], N::load(v.v[k]));
    }
  }
  combine_groups(m, Max{}, partial, at);
  // The sum of exp(v - m). m is the column's max: every term is in [0, 1], or NaN where m is -inf (a column of all
  // -inf: NaN everywhere, as torch's), +inf or NaN. Compensated as columns_forward's for float and double, whose
  // results keep the sum's error; a 16-bit result is rounded to 8 or 11 bits, far above a plain float sum's.
  constexpr bool kCompensated = sizeof(S) != 2;
  Vec<C, V> s = filled<C, V>(0), lost = filled<C, V>(0);
  if (at.active)
    for (int64_t j = at.group; j < n; j += at.groups) {
      const Vec<S, V> v = columns_at<S, V>(tile, j * width + at.column);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (kCompensated) {
          const C term = exp_term<S>(N::load(v.v[k]) - m.v[k]) - lost.v[k];
          const C sum = s.v[k] + term;
          lost.v[k] = (sum - s.v[k]) - term;
          s.v[k] = sum;
        } else {
          s.v[k] += exp_term<S>(N::load(v.v[k]) - m.v[k]);
        }
      }
    }
  combine_groups(s, GroupSum<S>{}, partial, at);
  Vec<C, kChunk> chunk_max;
  ForwardOutput<S, C> output[kChunk];
  if constexpr (kChunk == V) {
    chunk_max = m;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) output[k] = ForwardOutput<S, C>(s.v[k], log);
  } else {
    // partial holds the maxima in [0, width) and the sums in [width, 2 width): a chunked forward tile is at most 128
    // columns wide (plan_columns, tile_chunk), and kThreads at least 384.
    if (at.active && at.group == 0)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        partial[at.column + k] = m.v[k];
        partial[width + at.column + k] = s.v[k];
      }
    __syncthreads();
    if (chunk.active)
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        chunk_max.v[k] = partial[chunk.column + k];
        output[k] = ForwardOutput<S, C>(partial[width + chunk.column + k], log);
      }
  }
  if (chunk.active)
    for (int64_t j = chunk.group; j < n; j += chunk.groups) {
      const Vec<S, kChunk> v = columns_at<S, kChunk>(tile, j * width + chunk.column);
      Vec<S, kChunk> out;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) out.v[k] = N::store(output[k](N::load(v.v[k]) - chunk_max.v[k]));
      columns_at<S, kChunk>(y, chunk.offset + j * inner) = out;
    }
}

// The backward in tiles: g is staged (and softmax's y: the tile holds n x width of each) in kChunk-column chunks,
// d = sum(g) (log_softmax) or sum(g y) (softmax) taken from shared memory a column a thread, and the gradient
// written in chunks, log_softmax's y read once, there. Two columns a thread in the reduction, as the 16-bit
// forwards take, ran no faster or slower here (H100, over dim 1 of 1024^3, one column a thread against two in 384
// and in 512 threads, ms: bfloat16 log_softmax 3.05 against 3.06 and 3.14, softmax 3.62 against 3.83 and 3.94;
// float16 log_softmax 3.05 against 3.01 and 2.82; results/h100-2026-11-27/tile_columns.log).
// float's backward in blocks of 384 is held to 3 blocks an SM (56 registers): by itself it takes 67, which lets
// two run (H100, float32 log_softmax backward over dim 1 of 1024^3: 5.71 ms, held: 5.45). The 16-bit one takes
// 56 by itself, and ran slower held (bfloat16 log_softmax backward: 3.34 ms, 3.21 not held). A minimum of 0 is
// none; an explicit 1 let the others take more registers (bfloat16's 384: 72 instead of 56).
template <class S, int kThreads, int kChunk>
__global__ void __launch_bounds__(kThreads, kThreads == kTileThreadsThree && sizeof(S) == 4 ? 3 : 0)
    tiles_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t n, int64_t inner,
                   int width, int64_t tiles, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  using Chunk = Vec<S, kChunk>;
  __shared__ C partial[kThreads];
  S* staged_g = tile_memory<S>();
  S* staged_y = staged_g + n * width;
  const TilePosition chunk(n, inner, width, tiles, kThreads, kChunk), at(n, inner, width, tiles, kThreads, 1);
  copy_tile<S, kChunk>(staged_g, g, chunk, n, inner, width);
  if (!log) copy_tile<S, kChunk>(staged_y, y, chunk, n, inner, width);
  tile_copied();
  C d = 0;
  if (at.active)
    for (int64_t j = at.group; j < n; j += at.groups) {
      const C gj = N::load(staged_g[j * width + at.column]);
      d += log ? gj : gj * N::load(staged_y[j * width + at.column]);
    }
  d = combine_groups(d, GroupSum<S>{}, partial, at);
  Vec<C, kChunk> chunk_d;
  if constexpr (kChunk == 1) {
    chunk_d.v[0] = d;
  } else {
    if (at.active && at.group == 0) partial[at.column] = d;
    __syncthreads();
    if (chunk.active)
#pragma unroll
      for (int k = 0; k < kChunk; ++k) chunk_d.v[k] = partial[chunk.column + k];
  }
  if (!chunk.active) return;
  if (log) {
    // 16-byte chunks two loads in flight (32 bytes a thread, as 8 of float32's 4 bytes): 8 held bfloat16's
    // kernel at 124 registers and spilled float32's.
    constexpr int kUnroll = kChunk * sizeof(S) == 16 ? 2 : kTileUnroll;
    for_each_strided<kUnroll>(
        chunk.group, n, chunk.groups, [&](int64_t j) { return columns_at<S, kChunk>(y, chunk.offset + j * inner); },
        [&](int64_t j, const Chunk& yj) {
          const Chunk gj = columns_at<S, kChunk>(staged_g, j * width + chunk.column);
          Chunk out;
#pragma unroll
          for (int k = 0; k < kChunk; ++k)
            out.v[k] = N::store(N::load(gj.v[k]) - exp_for<S>(N::load(yj.v[k])) * chunk_d.v[k]);
          columns_at<S, kChunk>(gi, chunk.offset + j * inner) = out;
        });
  } else {
    for (int64_t j = chunk.group; j < n; j += chunk.groups) {
      const Chunk gj = columns_at<S, kChunk>(staged_g, j * width + chunk.column);
      const Chunk yj = columns_at<S, kChunk>(staged_y, j * width + chunk.column);
      Chunk out;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) out.v[k] = N::store(N::load(yj.v[k]) * (N::load(gj.v[k]) - chunk_d.v[k]));
      columns_at<S, kChunk>(gi, chunk.offset + j * inner) = out;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Long columns, too few of them to fill the GPU one a thread: a block takes `width` neighbouring columns of one
// outer index, placed as a tile's threads are (TilePosition, V columns a thread: a warp reads whole row segments),
// each thread an online (max, sum) over its rows in global memory, the groups' results combined in `partial`, then
// the output written in a second pass over global memory. Its reads are three to the floor's two (the backward five
// to three), where the columns kernels ran a thread a column. H100, softmax over dim 1, float32 forward
// (results/h100-2026-11-27/split_columns.log): 16 x 16384 x 1024 1.42 ms against 5.69 in the columns kernels
// (torch 19.9), 1 x 1000000 x 8 2.60 against 249.7 (torch 8.97).

constexpr int kSplitColumnThreads = 512;

template <class S, int V>
__global__ void __launch_bounds__(kSplitColumnThreads)
    split_columns_forward(const S* __restrict__ x, S* __restrict__ y, int64_t n, int64_t inner, int width,
                          int64_t tiles, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C partial[kSplitColumnThreads];
  const TilePosition at(n, inner, width, tiles, kSplitColumnThreads, V);
  OnlineSum<S> sums[V];
  if (at.active)
    for (int64_t j = at.group; j < n; j += at.groups) {
      const Vec<S, V> x_j = columns_at<S, V>(x, at.offset + j * inner);
#pragma unroll
      for (int k = 0; k < V; ++k) sums[k].add(N::load(x_j.v[k]));
    }
  Vec<C, V> m, s;
#pragma unroll
  for (int k = 0; k < V; ++k) m.v[k] = sums[k].m;
  combine_groups(m, Max{}, partial, at);
#pragma unroll
  for (int k = 0; k < V; ++k) s.v[k] = sums[k].sum_at(m.v[k]);
  combine_groups(s, GroupSum<S>{}, partial, at);
  if (!at.active) return;
  ForwardOutput<S, C> output[V];
#pragma unroll
  for (int k = 0; k < V; ++k) output[k] = ForwardOutput<S, C>(s.v[k], log);
  for (int64_t j = at.group; j < n; j += at.groups) {
    const Vec<S, V> x_j = columns_at<S, V>(x, at.offset + j * inner);
    Vec<S, V> y_j;
#pragma unroll
    for (int k = 0; k < V; ++k) y_j.v[k] = N::store(output[k](N::load(x_j.v[k]) - m.v[k]));
    columns_at<S, V>(y, at.offset + j * inner) = y_j;
  }
}

template <class S, int V>
__global__ void __launch_bounds__(kSplitColumnThreads)
    split_columns_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t n,
                           int64_t inner, int width, int64_t tiles, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C partial[kSplitColumnThreads];
  const TilePosition at(n, inner, width, tiles, kSplitColumnThreads, V);
  Vec<C, V> d = filled<C, V>(0);
  if (at.active)
    for (int64_t j = at.group; j < n; j += at.groups) {
      const Vec<S, V> g_j = columns_at<S, V>(g, at.offset + j * inner);
      if (log) {
#pragma unroll
        for (int k = 0; k < V; ++k) d.v[k] += N::load(g_j.v[k]);
      } else {
        const Vec<S, V> y_j = columns_at<S, V>(y, at.offset + j * inner);
#pragma unroll
        for (int k = 0; k < V; ++k) d.v[k] += N::load(g_j.v[k]) * N::load(y_j.v[k]);
      }
    }
  combine_groups(d, GroupSum<S>{}, partial, at);
  if (!at.active) return;
  for (int64_t j = at.group; j < n; j += at.groups) {
    const Vec<S, V> g_j = columns_at<S, V>(g, at.offset + j * inner), y_j = columns_at<S, V>(y, at.offset + j * inner);
    Vec<S, V> gi_j;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C gk = N::load(g_j.v[k]), yk = N::load(y_j.v[k]);
      gi_j.v[k] = N::store(log ? gk - exp_for<S>(yk) * d.v[k] : yk * (gk - d.v[k]));
    }
    columns_at<S, V>(gi, at.offset + j * inner) = gi_j;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Host side: choosing a path and launching it.

struct DeviceInfo {
  int major = 0, sms = 1, shared_per_block = 48 * 1024;  // shared memory a block may opt in to
  int cooperative = 0;  // cooperative launches (split_in_steps)
};

inline DeviceInfo device_info() {
  static DeviceInfo cache[64];
  static bool known[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) device = 0;
  if (!known[device]) {
    cudaDeviceGetAttribute(&cache[device].major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&cache[device].sms, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&cache[device].shared_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    cudaDeviceGetAttribute(&cache[device].cooperative, cudaDevAttrCooperativeLaunch, device);
    known[device] = true;
  }
  return cache[device];
}

// The register configurations (forward and backward): threads per row and elements per thread, rows of up to
// 8192 elements. Longer rows are staged: on the H100 that ran the forward faster than 1024-thread blocks of
// registers (16384 x 16384 float32: 0.74 ms against 1.15 in 1024 x 16, timed with register kernels up to 12 %
// slower than these) and than clusters of them (4096 x 393216 float32: 6.1 ms in 16 staged blocks against 7.7 in
// 8 x 1024 x 48); the backward at 393216 runs 3-7 % slower staged than it did in those clusters (softmax float32:
// 8.9 ms against 8.3), a loss taken for one path fewer. Each is compiled for every type and direction: with 11
// rather than 5 the cold CPU + CUDA build on the H100 host took 16.2-17.8 s against 14.3-16.3
// (results/h100-2026-11-27/build_softmax_configs.log).
struct RegConfig {
  int threads, elements;
};
constexpr RegConfig kConfigs[] = {{4, 8},   {8, 8},   {16, 8},   {32, 8},   {16, 16},  {32, 16},
                                   {64, 16}, {32, 32}, {128, 16}, {256, 16}, {256, 32}};
constexpr int kMaxCluster = 8;          // the portable cluster size
constexpr int kMaxHopperCluster = 16;   // Hopper's largest (non-portable: allow_staging opts in)
static_assert(kMaxHopperCluster <= 32, "cluster_reduce reads one block's slot per lane of a warp");
constexpr int64_t kStaticShared = 1024;  // room left for a kernel's static shared memory

enum class Path { Registers, Staged, Split };

// What a row-wise call runs: a register configuration (one block), a staged part in clusters of `cluster` blocks
// when cluster > 1, or the two-pass split into `parts` parts of `chunk` grid positions; vectors `vec` wide.
struct Plan {
  Path path = Path::Split;
  RegConfig config{0, 0};
  int cluster = 1;
  int64_t part = 0;
  int64_t parts = 1, chunk = 0;
  int vec = 1;
  bool edges = false;  // rows that do not start on the 16-byte grid (see load_vec); never on the register path
  bool stage_both = false;  // a staged backward's: y and g staged (see staged_backward)
  // The split path in steps of step_rows rows (split_in_steps), `step_parts` parts of `step_chunk` a row, where
  // step_rows > 0; else, or where the cooperative launch is refused, the two kernels with parts and chunk.
  int64_t step_rows = 0, step_parts = 0, step_chunk = 0;
};

// The most blocks a 16-bit row's forward is staged in: the portable cluster size. Up to 8 staged ran faster than
// the two passes once the 16-bit parts were copied by cp.async and their exponentials taken by ex2.approx
// (exp_for; a cap of 2 was right before either): H100, bfloat16 softmax at 4096 x 131072 0.93 ms in 3 blocks
// against 1.20 in two passes, 4096 x 262144 1.84 in 5 against 2.38, 4096 x 393216 2.93 in 7 against 3.56. In 16
// blocks it ran 4.42 there. Their backward, and float32 both ways, ran faster staged in up to 16 (4096 x 393216
// bfloat16 softmax backward: 5.19 ms in 8 blocks, 5.39 in two passes).
constexpr int kMaxStagedCluster16Forward = kMaxCluster;

// Cluster sizes a row is staged in by default: powers of two (1, 2, 4, 8, 16 blocks: half an SM to 8 SMs at two
// blocks an SM), which pack a GPC's SMs; other sizes left SMs idle and ran slower although their parts were fuller
// (results/h200-2026-11-25/cluster_sizes.log, H200, softmax: 8192 x 65536 float32 forward 1.39 ms in 3 blocks,
// 1.29 in 4; 4096 x 131072 float32 forward 1.39 in 5, 1.44 in 6, 1.31 in 8; bfloat16 4096 x 131072 0.84 in 3, 0.72
// in 4; 4096 x 262144 1.60 in 5, 1.73 in 6, 1.47 in 8; 4096 x 393216 forward 2.53 in 7, 2.37 in 8, backward 4.50
// in 7, 4.10 in 8; earlier, H100, 4096 x 393216 float32 6.54 ms in 14 blocks, 6.10 in 16).
inline bool staged_cluster_size(int cluster) { return (cluster & (cluster - 1)) == 0; }

// The grid positions each block of `cluster` holds when a row's `span` positions are staged: a multiple of vec.
inline int64_t staged_part(int64_t span, int cluster, int vec) {
  return ((span + cluster - 1) / cluster + vec - 1) / vec * vec;
}

// Whether the operands (b may be null) have the same address mod 16: then a row's 16-byte vectors line up in all
// of them, wherever the row starts, and the kernels read and write whole vectors.
inline bool vectors_line_up(const void* a, const void* b, const void* c) {
  const auto residue = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16; };
  return residue(a) == residue(c) && (b == nullptr || residue(b) == residue(a));
}

// Whether every operand (b may be null) starts on the grid of `bytes`.
inline bool on_grid(int bytes, const void* a, const void* b, const void* c) {
  const auto on = [bytes](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return on(a) && on(b) && on(c);
}

// The plan for a call over `rows` rows of n elements (forward: a = x, b null; backward: a = grad_out, b = output).
template <class S>
Plan plan_rows(bool backward, bool log, int64_t rows, int64_t n, const void* a, const void* b, const void* out) {
  Plan plan;
  const DeviceInfo device = device_info();
  const int64_t shared_limit = device.shared_per_block - kStaticShared;
  const int max_cluster = device.major == 9 ? kMaxHopperCluster : device.major > 9 ? kMaxCluster : 1;
  int64_t span = n;  // the grid positions a row covers (see load_vec)
  const auto set_vec = [&](int vec) {
    plan.vec = vec;
    plan.edges = n % vec != 0 || reinterpret_cast<uintptr_t>(a) / sizeof(S) % vec != 0;
    span = n + (plan.edges ? vec - 1 : 0);
  };
  set_vec(vectors_line_up(a, b, out) ? 16 / static_cast<int>(sizeof(S)) : 1);
  // The staged backward stages both operands where they fit (see staged_backward): softmax's, whose second pass
  // would read g again, and 16-bit log_softmax's where that needs no cluster. Its shared memory is then twice the
  // part. Whether a row is staged at all does not depend on it (a part of one operand fits where both do), so
  // softmax and log_softmax take the same path, and workspace_bytes can plan without knowing which it is.
  const bool stage_both = backward && (!log || sizeof(S) == 2);
  const auto staged_bytes = [&](int cluster, bool both) {
    return staged_part(span, cluster, plan.vec) * static_cast<int64_t>(sizeof(S)) * (both ? 2 : 1);
  };
  const auto fits_staged = [&](int cluster, int64_t limit, bool both) {
    return rows * cluster <= 0x7fffffff && staged_bytes(cluster, both) <= limit;
  };
  const auto staged = [&](int cluster, bool both) {
    plan.path = Path::Staged;
    plan.cluster = cluster;
    plan.part = staged_part(span, cluster, plan.vec);
    plan.stage_both = both;
    return plan;
  };
  // Past 1024 elements (shorter rows: short_row), a forward takes the first configuration that holds the row, so
  // that the row fills most of it (131072 x 2048 bfloat16 on the H100: 0.36 ms in 128 x 16 against 0.78 in 256 x
  // 32), and a backward 256 threads (128 x 16 ran up to 16 % slower), the first of them that holds the row:
  // log_softmax in the fuller 256 x 16 ran 6 % faster at 4096 and 15 % at 2048 than in 256 x 32. A 16-bit
  // backward past 4096 elements is staged instead (both operands copied by cp.async: bfloat16 softmax at 32768 x
  // 8192 0.52 ms against 0.55 in 256 x 32).
  const auto suits = [&](const RegConfig& c) {
    if (!backward) return true;
    if (sizeof(S) == 2 && c.threads * c.elements > 4096) return false;
    return c.threads == 256;
  };
  // Rows of up to 1024 elements, each direction and type in the configuration that ran it fastest (H100, ms, 2^28
  // elements in rows of 32 / 64 / 96 / 128 / 160 / 256 and 264 / 384 / 512 / 640 / 768 / 1024, every pair timed:
  // results/h100-2026-11-27/plans_rows_to_256.log, plans_short_rows.log; the rule against the one before it:
  // ab_rows_to_256.log, ab_rows_129_256.log).
  // - Up to 256, the fewest threads of 8 elements that hold the row (4, 8, 16 or 32; a warp then takes several
  //   rows), float32 backwards twice as many (a vector of each operand a thread), 16-bit rows of 129-256 16 threads
  //   of 16 (bfloat16 at 136 / 160 / 200, log_softmax forward 0.581 / 0.504 / 0.420 -> 0.453 / 0.405 / 0.360, torch
  //   0.535 / 0.466 / 0.407; backward 0.583 / 0.553 / 0.529 -> 0.528 / 0.529 / 0.538; softmax's 0.524 / 0.528 /
  //   0.530 -> 0.528 / 0.534 / 0.540: ab_rows_129_256.log). A warp of 8 elements a thread for every such row left
  //   most lanes idle: at 32 / 64 / 96 / 128, float32 softmax forward 2.109 / 1.083 / 0.790 / 0.708 -> 0.711 /
  //   0.716 / 0.714 / 0.712 (torch 0.844 / 0.711 / 0.715 / 0.715), bfloat16 2.148 / 1.090 / 0.741 / 0.563 -> 0.356
  //   / 0.354 / 0.404 / 0.356 (torch 0.805 / 0.561 / 0.535 / 0.470), float32 log_softmax backward 1.546 / 1.132 ->
  //   1.051 / 1.051 (torch 1.050 / 1.053), bfloat16 1.645 / 0.873 / 0.656 / 0.576 -> 0.528 / 0.529 / 0.529 / 0.529
  //   (torch 0.640 / 0.561 / 0.595 / 0.550).
  // - Up to 512, a warp of 16 elements a thread, where a warp of 32 left most of its registers empty: at 264 / 384 /
  //   512, bfloat16 softmax forward 0.704 / 0.494 / 0.396 -> 0.431 / 0.357 / 0.358 (torch 0.572 / 0.460 / 0.424),
  //   float32 0.809 / 0.708 / 0.712 -> 0.716 / 0.713 / 0.714, bfloat16 softmax backward 0.591 / 0.598 / 0.561 ->
  //   0.529 / 0.529 / 0.532.
  // - Past 512, 64 x 16, except 16-bit forwards, whose warp of 32 elements ran faster at 640 (bfloat16 softmax
  //   0.358 against 0.384): float32 softmax forward at 1024 0.727 -> 0.713, bfloat16 softmax backward at 640 / 768
  //   / 1024 0.580 / 0.549 / 0.543 -> 0.540 / 0.526 / 0.527. float32 backwards take 64 x 16 from 257 (within 1 % of
  //   the others, 2 % ahead at 264).
  const auto short_row = [&]() -> RegConfig {
    if (span <= 256) {
      if (sizeof(S) == 2 && span > 128) return {16, 16};
      const int64_t held = backward && sizeof(S) == 4 ? 2 * span : span;
      for (int threads = 4; threads < 32; threads *= 2)
        if (threads * 8 >= held) return {threads, 8};
      return {32, 8};
    }
    if (span <= 512 && (!backward || sizeof(S) == 2)) return {32, 16};
    if (!backward && sizeof(S) == 2) return {32, 32};
    return {64, 16};
  };
  const auto registers = [&](RegConfig config) {
    plan.path = Path::Registers;
    plan.config = config;
    return plan;
  };
  // ACTIVATIONS_SOFTMAX_PLAN forces a path where it fits: "threads,elements" (one of kConfigs), "staged,C" (C
  // blocks a row, up to the device's largest cluster and shared memory), "split" (the two kernels) or "steps"
  // (split_in_steps, where the device has cooperative launches): for timing the alternatives
  // (tools/softmax_plans.py), not for use. Read at every call, so that one process can time several.
  const char* forced = getenv("ACTIVATIONS_SOFTMAX_PLAN");
  const bool force_steps = forced != nullptr && strcmp(forced, "steps") == 0;
  const bool force_two_kernels = forced != nullptr && strcmp(forced, "split") == 0;
  const bool force_split = force_steps || force_two_kernels;
  if (!std::is_same_v<S, double> && !force_split) {  // float64 (rarely fast-path material) takes the two-pass path
    int threads = 0, elements = 0, cluster = 0;
    if (forced != nullptr && sscanf(forced, "staged,%d", &cluster) == 1 && cluster >= 1 && cluster <= max_cluster &&
        fits_staged(cluster, shared_limit, false))
      return staged(cluster, stage_both && fits_staged(cluster, shared_limit, true));
    if (forced != nullptr && sscanf(forced, "%d,%d", &threads, &elements) == 2 && !plan.edges &&
        static_cast<int64_t>(threads) * elements >= span) {
      for (const RegConfig& c : kConfigs)
        if (c.threads == threads && c.elements == elements) return registers(c);
    }
    const RegConfig& largest = kConfigs[std::size(kConfigs) - 1];
    if (n <= static_cast<int64_t>(largest.threads) * largest.elements) {
      if (plan.edges) set_vec(1);  // the register path has no edge code: a row off the grid goes element-wide
      if (span <= 1024) return registers(short_row());
      for (const RegConfig& c : kConfigs)
        if (static_cast<int64_t>(c.threads) * c.elements >= span && suits(c)) return registers(c);
    }
    // Longer rows: staged in the fewest blocks a row (a cluster on sm_90+) whose parts let two blocks share an SM.
    const int most = sizeof(S) == 2 && !backward ? std::min(max_cluster, kMaxStagedCluster16Forward) : max_cluster;
    const int64_t limit = std::min(kStagedBytes, shared_limit);
    if (stage_both) {
      // A 16-bit row whose two operands fit one block's shared memory, all of it, is staged there, one block an SM
      // and no cluster (H100, bfloat16 backward: softmax at 8192 x 50257 0.85 ms against 1.20 in clusters of 2
      // blocks of half the size, 8192 x 32768 0.53 against 0.58; log_softmax, which otherwise stages g alone in
      // one block, 0.85 against 1.03 and 0.53 against 0.61). Longer rows take the fewest blocks that fit two to an
      // SM: softmax's (bfloat16 4096 x 393216: 4.02 ms in 16 blocks against 5.01 staging y alone in 8), and
      // 16-bit log_softmax's since their clusters take rows in turn (staged_clusters; bfloat16, g alone -> both:
      // 4096 x 393216 3.92 -> 3.65 ms, 4096 x 131072 1.30 -> 1.21, 16384 x 65536 2.50 -> 2.40, 2048 x 300007 2.09
      // -> 1.60; results/h100-2026-11-27/ab_backward.log). float32 log_softmax rows stage g alone.
      if (sizeof(S) == 2 && fits_staged(1, shared_limit, true)) return staged(1, true);
      if (!log || sizeof(S) == 2) {
        for (int c = 1; c <= most; ++c) {
          if (!staged_cluster_size(c) || !fits_staged(c, limit, true)) continue;
          // A 16-bit row on the 16-byte grid that would take 16 such blocks takes 8 of a whole SM where they fit,
          // its clusters taking rows in turn. H100, ms, 16 -> 8 blocks (results/h100-2026-11-27/
          // ab_backward_16bit_whole_sm.log): bfloat16 softmax 4096 x 262144 2.53 -> 2.40, 4096 x 393216 3.64 ->
          // 3.58, 2048 x 327680 1.54 -> 1.48, 1000 x 393216 0.90 -> 0.90; log_softmax 2.52 -> 2.41, 3.65 -> 3.58,
          // 1.54 -> 1.50, 0.90 -> 0.90; float16 alike.
          if (sizeof(S) == 2 && c == 16 && !plan.edges && fits_staged(8, shared_limit, true)) return staged(8, true);
          return staged(c, true);
        }
        // A float32 softmax row whose y alone would take parts over 64 KB in the largest cluster, but whose y and g
        // fit it at one block an SM, stages both so, on the 16-byte grid and with more rows than such clusters
        // fit the GPU: its clusters then take rows in turn (staged_clusters). H100, ms, staging y alone -> both
        // in turn: 4096 x 393216 8.79 -> 7.65, 2048 x 327680 3.44 -> 3.23, 1000 x 393216 2.14 -> 1.87; with y's
        // parts of 64 KB it ran slower (4096 x 262144 4.99 -> 5.59), and both at one block an SM without rows in
        // turn slower everywhere (4096 x 393216 8.62, 4096 x 262144 6.19; results/h100-2026-11-27/
        // ab_f32_backward.log).
        if (sizeof(S) == 4 && plan.vec == 4 && !plan.edges && rows * most > device.sms &&
            !fits_staged(most, 64 * 1024, false) && fits_staged(most, shared_limit, true))
          return staged(most, true);
      }
    }
    for (int c = 1; c <= most; ++c)
      if (staged_cluster_size(c) && fits_staged(c, limit, false)) return staged(c, false);
  }
  plan.path = Path::Split;
  const int64_t step = static_cast<int64_t>(kSplitThreads) * plan.vec;
  const int64_t min_chunk = step * 4;
  const int64_t wanted_parts = std::max<int64_t>(1, (4 * device.sms + rows - 1) / rows);
  int64_t chunk = std::max(min_chunk, (span + wanted_parts - 1) / wanted_parts);
  chunk = (chunk + step - 1) / step * step;
  int64_t parts = (span + chunk - 1) / chunk;
  if (parts > kSplitThreads) {  // the apply pass combines one part per thread
    chunk = ((span + kSplitThreads - 1) / kSplitThreads + step - 1) / step * step;
    parts = (span + chunk - 1) / chunk;
  }
  plan.parts = parts;
  plan.chunk = chunk;
  // The passes in steps (split_in_steps, not float64's: see there): a step holds kStepBytes of rows, or one row,
  // and its rows share the grid's blocks (two an SM, the kernel's __launch_bounds__).
  const int64_t row_bytes = n * static_cast<int64_t>(sizeof(S)) * (backward ? 2 : 1);
  const bool many_long_rows = sizeof(S) < 8 && rows * row_bytes > kStepsMinBytes && row_bytes >= kStepsMinRowBytes;
  const int64_t grid_blocks = std::min<int64_t>(2 * device.sms, kSplitThreads);  // apply: a part a thread
  if (device.cooperative && (force_steps || (many_long_rows && !force_two_kernels))) {
    plan.step_rows = std::clamp<int64_t>(kStepBytes / row_bytes, 1, std::min(rows, grid_blocks));
    const int64_t wanted = grid_blocks / plan.step_rows;
    plan.step_chunk = ((span + wanted - 1) / wanted + step - 1) / step * step;
    plan.step_parts = (span + plan.step_chunk - 1) / plan.step_chunk;
  }
  return plan;
}

inline const char* last_error() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

// Launches kernel over `blocks` blocks of `threads` with `shared` bytes of dynamic shared memory, as clusters of
// `cluster` blocks when cluster > 1.
template <class... KernelArgs, class... Args>
const char* launch(void (*kernel)(KernelArgs...), int64_t blocks, int threads, int cluster, int64_t shared,
                   cudaStream_t stream, Args... args) {
  if (blocks > 0x7fffffff) return "too many rows for one launch";
  if (cluster == 1) {
    kernel<<<static_cast<unsigned>(blocks), threads, static_cast<size_t>(shared), stream>>>(args...);
    return last_error();
  }
  const ClusterLaunch clusters(blocks, threads, cluster, shared, stream);
  const cudaError_t error = cudaLaunchKernelEx(&clusters.config, kernel, static_cast<KernelArgs>(args)...);
  return error == cudaSuccess ? last_error() : cudaGetErrorString(error);
}

// Launches kernel over `blocks` blocks of kSplitThreads as one cooperative grid (every block resident at once, so
// that cg::this_grid().sync() can hold them at a barrier).
template <class... KernelArgs, class... Args>
cudaError_t launch_cooperative(void (*kernel)(KernelArgs...), int64_t blocks, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kSplitThreads);
  config.stream = stream;
  cudaLaunchAttribute cooperative[1];
  cooperative[0].id = cudaLaunchAttributeCooperative;
  cooperative[0].val.cooperative = 1;
  config.attrs = cooperative;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
}

// The clusters a staged kernel launches: one a row, except for forwards of rows on the 16-byte grid in clusters of
// 4 blocks or more, 16-bit ones and float32 ones whose parts are over 64 KB. Those take as many clusters as the GPU
// holds at once, each taking rows r, r + clusters, ... and copying its next row's part while it writes the last
// (staged_forward). H100, bfloat16 softmax, ms, one cluster a row -> so (results/h100-2026-11-27/
// staged_rows_in_turn.log): 4096 x 393216 2.379 -> 2.300 (log_softmax 2.384 -> 2.255), 2048 x 327680 1.008 ->
// 0.974, 4096 x 262144 1.598 -> 1.553, 4096 x 131072 0.791 -> 0.775. It ran slower in clusters of 2 (16384 x 65536
// 1.489 -> 1.534) and in one block (8192 x 32768 0.364 -> 0.410), and with rows off the grid (2048 x 300007, whose
// edge vectors are loaded, not copied: 0.893 -> 0.931).
// float32 rows are copied so too where taken in turn (loaded through registers, in turn they ran slower: 4096 x
// 393216 4.815 -> 5.250). float32, ms, one cluster a row -> in turn, copied (results/h100-2026-11-27/
// ab_f32_forward_clusters.log): softmax 4096 x 393216 4.79 -> 4.53 (16 blocks of 96 KB), 2048 x 327680 2.14 ->
// 1.93 (16 of 80 KB), 4096 x 200000 2.50 -> 2.31 (8 of 100 KB), 8192 x 100000 2.46 -> 2.34 (4 of 100 KB). Not
// with parts of 64 KB, three blocks an SM (4096 x 262144 log_softmax 3.02 -> 3.06, 4096 x 131072 1.46 -> 1.52;
// ab_f32_forward.log), in clusters of 2 (16384 x 40000 log_softmax 1.830 -> 1.849) or in one block (16384 x 24576
// 1.09 -> 1.14).
// A 16-bit backward with y and g staged takes rows in turn likewise in clusters of 8 blocks or more (staged_backward).
// H100, bfloat16 softmax backward, ms, one cluster a row -> so (results/h100-2026-11-27/ab_backward.log): 4096 x
// 393216 3.99 -> 3.65, 2048 x 327680 1.665 -> 1.540, 1000 x 393216 0.984 -> 0.902, 4096 x 131072 1.230 -> 1.214; in
// clusters of 4 it ran slower (16384 x 65536 2.348 -> 2.391). So does a float32 softmax backward whose y and g take
// parts of a whole SM (plan_rows); at two blocks an SM rows in turn ran float32 slower (4096 x 131072 2.32 -> 2.58,
// 16384 x 65536 4.48 -> 4.89; results/h100-2026-11-27/ab_f32_backward.log).
template <class S, class Kernel>
int64_t staged_clusters(Kernel kernel, const Plan& plan, bool backward, int64_t rows, int64_t shared) {
  if (sizeof(S) > 4 || plan.vec != 16 / static_cast<int>(sizeof(S)) || plan.edges) return rows;
  if (backward ? !plan.stage_both || (sizeof(S) == 2 ? plan.cluster < 8 : shared <= kStagedBytes)  // a whole SM's
                : plan.cluster < 4 || (sizeof(S) == 4 && shared <= 64 * 1024))
    return rows;
  // cudaOccupancyMaxActiveClusters, for the last kernel, cluster size and shared memory asked on each device. Any
  // count gives the same result (a cluster that has to wait for a slot still takes its rows), so a value raced over
  // by two threads costs time at most.
  struct Known {
    Kernel kernel = nullptr;
    int cluster = 0;
    int64_t shared = 0;
    int clusters = 0;
  };
  static Known known[64];
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) return rows;
  Known& k = known[device];
  if (k.kernel != kernel || k.cluster != plan.cluster || k.shared != shared) {
    const ClusterLaunch one(plan.cluster, kStagedThreads, plan.cluster, shared, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &one.config) != cudaSuccess) {
      cudaGetLastError();  // one a row, as before: the launch reports whatever is wrong
      return rows;
    }
    k = Known{kernel, plan.cluster, shared, clusters};
  }
  return k.clusters > 0 ? std::min<int64_t>(rows, k.clusters) : rows;
}

// pick(elements, threads) of the entry of kConfigs that is `config`, as compile-time constants: every entry's
// kernels are instantiated from the table itself.
template <class Pick, size_t... I>
const char* pick_config(RegConfig config, Pick&& pick, std::index_sequence<I...>) {
  const char* result = "internal error: unknown register configuration";
  const auto is = [&](RegConfig c) { return config.threads == c.threads && config.elements == c.elements; };
  ((is(kConfigs[I]) && (result = pick(std::integral_constant<int, kConfigs[I].elements>{},
                                      std::integral_constant<int, kConfigs[I].threads>{}),
                        true)) ||
   ...);
  return result;
}

// Calls fn(Kernel<S, V, E, T>) for the plan's register configuration.
template <class S, int V, bool kBackward, class Fn>
const char* with_reg_kernel(const Plan& plan, bool log, Fn&& fn) {
  const auto pick = [&](auto e, auto t) -> const char* {
    constexpr int E = decltype(e)::value, T = decltype(t)::value;
    if constexpr (E % V != 0) {
      return "internal error: elements per thread not a multiple of the vector width";
    } else if constexpr (kBackward) {
      return log ? fn(regs_backward<S, V, E, T, true>) : fn(regs_backward<S, V, E, T, false>);
    } else {
      return fn(regs_forward<S, V, E, T>);
    }
  };
  return pick_config(plan.config, pick, std::make_index_sequence<std::size(kConfigs)>{});
}

// Lets `kernel` take up to the device's most dynamic shared memory, with the L1 cache carved out to the least,
// and (Hopper) clusters past the portable 8 blocks; once per device.
template <class Kernel>
const char* allow_staging(Kernel kernel, bool* done, int64_t static_shared = kStaticShared) {
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64 || done[device]) return nullptr;
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           device_info().shared_per_block - static_cast<int>(static_shared));
  if (error == cudaSuccess)
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (error == cudaSuccess && device_info().major == 9)
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (error != cudaSuccess) return cudaGetErrorString(error);
  done[device] = true;
  return nullptr;
}

// Calls fn(kernel) with the staged kernel of the plan, ready to launch.
template <class S, int V, bool kEdges, bool kBackward, bool kCluster, class Fn>
const char* with_staged_kernel(Fn&& fn) {
  static bool ready[64] = {};
  const auto run = [&](auto kernel) -> const char* {
    if (const char* error = allow_staging(kernel, ready)) return error;
    return fn(kernel);
  };
  if constexpr (kBackward) {
    return run(staged_backward<S, V, kEdges, kCluster>);
  } else {
    return run(staged_forward<S, V, kEdges, kCluster>);
  }
}

// Runs a row-wise call (forward: a = x, b unused; backward: a = grad_out, b = output).
template <class S, bool kBackward>
const char* run_rows(bool log, int64_t rows, int64_t n, const void* a, const void* b, void* out, void* workspace,
                     cudaStream_t stream) {
  const Plan plan = plan_rows<S>(kBackward, log, rows, n, a, kBackward ? b : nullptr, out);
  const S* pa = static_cast<const S*>(a);
  const S* pb = static_cast<const S*>(b);
  S* po = static_cast<S*>(out);
  using C = typename Num<S>::C;
  const auto with_vec = [&](auto vec) -> const char* {
    constexpr int V = decltype(vec)::value;
    if constexpr (std::is_same_v<S, double>) {
    } else if (plan.path == Path::Registers) {
      const int threads = block_threads(plan.config.threads);
      const int64_t rows_per_block = threads / plan.config.threads;
      const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
      return with_reg_kernel<S, V, kBackward>(plan, log, [&](auto kernel) {
        if constexpr (kBackward) {
          return launch(kernel, blocks, threads, 1, 0, stream, pa, pb, po, rows, n);
        } else {
          return launch(kernel, blocks, threads, 1, 0, stream, pa, po, rows, n, log);
        }
      });
    } else if (plan.path == Path::Staged) {
      const auto staged = [&](auto kernel) {
        const int64_t shared = plan.part * static_cast<int64_t>(sizeof(S)) * (plan.stage_both ? 2 : 1);
        const int64_t blocks = staged_clusters<S>(kernel, plan, kBackward, rows, shared) * plan.cluster;
        if constexpr (kBackward) {
          return launch(kernel, blocks, kStagedThreads, plan.cluster, shared, stream, pa, pb, po, rows, n, plan.part,
                        log, plan.stage_both);
        } else {
          return launch(kernel, blocks, kStagedThreads, plan.cluster, shared, stream, pa, po, rows, n, plan.part, log);
        }
      };
      const auto by_cluster = [&](auto edges) {
        constexpr bool kEdges = decltype(edges)::value;
        if (plan.cluster > 1) return with_staged_kernel<S, V, kEdges, kBackward, true>(staged);
        return with_staged_kernel<S, V, kEdges, kBackward, false>(staged);
      };
      if constexpr (V > 1) {
        if (plan.edges) return by_cluster(std::true_type{});
      }
      return by_cluster(std::false_type{});
    }
    if (rows * plan.parts > 0x7fffffff) return "too many rows for one launch";
    const auto grid = static_cast<unsigned>(rows * plan.parts);
    C* work = static_cast<C*>(workspace);
    const auto split = [&](auto edges) -> const char* {
      constexpr bool kEdges = decltype(edges)::value;
      if (plan.step_rows > 0) {
        const cudaError_t error =
            launch_cooperative(split_in_steps<S, V, kEdges, kBackward>, plan.step_rows * plan.step_parts, stream, pa,
                               pb, po, rows, n, plan.step_chunk, plan.step_parts, plan.step_rows, log, work);
        if (error == cudaSuccess) return nullptr;
        if (error != cudaErrorCooperativeLaunchTooLarge) return cudaGetErrorString(error);
        cudaGetLastError();  // refused (the grid would not be resident at once): the two kernels instead
      }
      split_partial<S, V, kEdges, kBackward><<<grid, kSplitThreads, 0, stream>>>(pa, pb, n, plan.chunk, plan.parts, log,
                                                                                 work);
      split_apply<S, V, kEdges, kBackward><<<grid, kSplitThreads, 0, stream>>>(pa, pb, po, n, plan.chunk, plan.parts,
                                                                               work, log);
      return last_error();
    };
    if constexpr (V > 1) {
      if (plan.edges) return split(std::true_type{});
    }
    return split(std::false_type{});
  };
  constexpr int kWide = 16 / sizeof(S);
  if (plan.vec == kWide) return with_vec(std::integral_constant<int, kWide>{});
  return with_vec(std::integral_constant<int, 1>{});
}

// Bytes of a column tile's shared memory at `width` columns: forward x's, backward g's and softmax's y.
template <class S>
int64_t tile_bytes(bool backward, bool log, int64_t n, int64_t width) {
  return n * width * static_cast<int64_t>(sizeof(S)) * (backward && !log ? 2 : 1);
}

template <class S>
constexpr int64_t kTileStaticShared = kTileThreadsFew * static_cast<int64_t>(sizeof(typename Num<S>::C));

// Columns a copy of a column tile (copy_tile) `width` wide: 16 bytes' worth where inner and the width are multiples
// of it and every operand is on a 16-byte boundary (a forward's tile at most 192 columns: see tiles_forward's
// partial); else two for the 16-bit forwards where inner and the width are even and both operands on a 4-byte
// boundary (one 4-byte access where two 2-byte ones were); else one.
template <class S>
int tile_chunk(bool backward, SoftmaxShape shape, int64_t width, const S* a, const S* b, const S* out) {
  constexpr int kWide = 16 / sizeof(S);
  if (shape.inner % kWide == 0 && width % kWide == 0 && (backward || 2 * width <= kTileThreadsThree) &&
      on_grid(16, a, b, out))
    return kWide;
  if (sizeof(S) == 2 && !backward && shape.inner % 2 == 0 && width % 2 == 0 && on_grid(4, a, nullptr, out))
    return 2;
  return 1;
}

// The width of the column tiles for a call over [outer, n, inner] (inner > 1), or 0 for the columns kernels.
// Columns of at least kTileMinRows elements take tiles, the most columns up to a 128-byte row segment (or all
// inner columns), halved while the tile is past kTileBytes and its row segment past 64 bytes (32 for 16-bit
// types but backwards copied in 16-byte chunks), then while it is past a block's whole shared memory. H100 (tools/softmax_plans.py, softmax over dim 1,
// tiles against the columns kernels; results/h100-2026-11-27/column_plans.log, measured before the tiles were
// copied in 16-byte chunks):
// - 1024 x 1024 x 1024 float32: forward 4.27 ms in 16 columns against 4.72; backward 6.51 in 16 against 7.75 (in
//   8, 32-byte rows: 7.17). bfloat16 backward 3.80 in 16 (32-byte rows, 64 KB) and 4.21 in 32 (128 KB) against 4.96.
// - 16 x 4096 x 4096 float32 forward 1.53 in 8 against 1.81; 2048 x 2048 x 8 float32 forward 0.15 against 0.74
//   (inner 8: a warp of the columns kernel reads 4 outer indices' short rows).
// - Shorter columns ran slower in such narrow tiles (4096 x 32 x 1024 float32 forward 2.04 against 0.53, 8 x 300 x
//   131072 1.51 against 1.35): a block's tile is small, and the columns kernel's second pass finds more in L2.
//   Columns shorter than kTileMinRows take wider tiles, or none (below).
// - 16-bit forwards over 32 or more columns ran slower in tiles of one column a thread (1024 x 1024 x 1024
//   bfloat16: 3.50 in 16 and 3.76 in 32 against 2.91; 16 x 4096 x 4096: 1.53 in 8 against 1.38) and faster in
//   tiles of two (tile_chunk: 2.49 in 32; 1.04 in 16): without two, they take the columns kernels.
// With 16-byte chunks (results/h100-2026-11-27/ab_tile_chunks.log), 64-byte rows still ran the float32 softmax
// forward faster than 128-byte ones (3.06 ms against 3.22; log_softmax's forward and backward 1-2 % slower).
// ACTIVATIONS_SOFTMAX_PLAN (see plan_rows) forces "columns" (also "columns,1" and "columns,16": column_vector;
// "columns,split": split_column_width) or "tiles,W" (W columns, where the tile fits one block), for timing the
// alternatives.
template <class S>
int plan_columns(bool backward, bool log, SoftmaxShape shape, const S* a, const S* b, const S* out) {
  const int64_t limit = device_info().shared_per_block - kTileStaticShared<S>;
  const auto fits = [&](int64_t width, int64_t budget) {
    const int64_t tiles = (shape.inner + width - 1) / width;
    return width <= kTileThreadsThree && shape.outer * tiles <= 0x7fffffff &&
           tile_bytes<S>(backward, log, shape.n, width) <= budget;
  };
  const char* forced = getenv("ACTIVATIONS_SOFTMAX_PLAN");
  int forced_width = 0;
  if (forced != nullptr && strncmp(forced, "columns", 7) == 0) return 0;
  if (forced != nullptr && sscanf(forced, "tiles,%d", &forced_width) == 1 && forced_width >= kTileMinWidth) {
    const int64_t width = std::min<int64_t>(forced_width, shape.inner);
    if (width >= kTileMinWidth && fits(width, limit)) return static_cast<int>(width);
  }
  int64_t width = std::min<int64_t>(shape.inner, 128 / sizeof(S));
  const auto halve = [&](int64_t budget, int64_t segment_bytes) {
    while (!fits(width, budget) && width * static_cast<int64_t>(sizeof(S)) > segment_bytes &&
           width / 2 >= kTileMinWidth)
      width /= 2;
  };
  if (shape.n < kTileMinRows) {
    // Short columns: the widest tile whose every staged tensor holds at most kShortTileBytes, of at most 256
    // columns (forwards 128, so that they copy in 16-byte chunks: tile_chunk), where the tile holds at least
    // kShortTileMinBytes; a smaller one gives its block too little to do, and the columns kernels run faster. H100,
    // softmax over dim 1 of [2^28 / (n inner), n, inner] (results/h100-2026-11-27/short_n_plans.log,
    // short_n_plans2.log), float32: at n = 64 forward 0.716 ms in 128 columns against 1.100 in the columns kernel,
    // backward 1.05 in 64-256 against 1.84; at n = 16 backward 1.049 in 256 against 1.480; at n = 256 forward 0.723
    // in 64 (64 KB) against 0.790 in 128; bfloat16 at n = 128 forward 0.416 in 128 against 0.627. At n = 16 the
    // float32 forward in 128 columns (8 KB) ran 1.349 ms against 0.773 in the columns kernel.
    width = std::min<int64_t>(shape.inner, backward ? 256 : 128);
    while (shape.n * width * static_cast<int64_t>(sizeof(S)) > kShortTileBytes && width / 2 >= kTileMinWidth)
      width /= 2;
    if (tile_bytes<S>(backward, log, shape.n, width) < kShortTileMinBytes) return 0;
  } else {
    // 16-bit backwards copied in 16-byte chunks keep 64-byte rows where the tile then takes a whole SM: bfloat16
    // softmax backward over dim 1 of 1024^3 2.27 ms in 64-byte rows (128 KB, g and y) against 2.55 in 32-byte ones
    // (three blocks an SM; results/h100-2026-11-27/plans_16bit_backward_tiles.log). The 16-bit forwards' passes
    // over shared memory take longer, and need other blocks beside them (one 128 KB tile an SM ran the bfloat16
    // forward at 55 % of a copy, tile_chunks_prototype.log).
    constexpr int kWide = 16 / sizeof(S);
    const bool chunked_backward = backward && tile_chunk<S>(backward, shape, kWide, a, b, out) == kWide;
    halve(kTileBytes, sizeof(S) == 2 && !chunked_backward ? 32 : 64);
  }
  halve(limit, 0);
  if (!backward && sizeof(S) == 2 && shape.inner >= 32 && tile_chunk<S>(backward, shape, width, a, b, out) == 1)
    return 0;
  return width >= kTileMinWidth && fits(width, limit) ? static_cast<int>(width) : 0;
}

// Columns a thread of the columns kernels: 16 bytes of them where a column is at most 16 bytes, inner a multiple
// and every pointer on the 16-byte grid, and the threads still fill every SM; else one (columns_forward). H100,
// over dim 1 (short_n_plans*.log): 16 bytes ran faster at n = 2 (float32) and n = 2-8 (bfloat16) both ways, one at
// n = 8 (float32 forward 0.781 ms against 1.057, backward 1.098 against 1.236) and at n = 16-32 (bfloat16 forward
// 0.464 against 0.539). `widest`: 16 bytes of columns where inner and the pointers allow them, else 1. Forced plans
// (ACTIVATIONS_SOFTMAX_PLAN) "columns,1" and "columns,16" take one and the widest, for timing and tests; the
// forward never takes 16 bytes of longer columns (it holds them in registers, columns_forward).
// A 16-bit log_softmax backward takes 16 bytes of columns of up to 32 bytes: over dim 1 of 16384 x 16 x 1024
// bfloat16, 0.596 ms against 0.795 one column a thread, where the softmax backward ran 0.683 against 0.597
// (short_n_plans2.log, short_n_plans3.log).
template <class S>
int column_vector(bool backward, bool log, SoftmaxShape shape, int widest) {
  const char* forced = getenv("ACTIVATIONS_SOFTMAX_PLAN");
  const int64_t limit = backward && log && sizeof(S) == 2 ? 32 : 16;
  const bool short_columns = shape.n * static_cast<int64_t>(sizeof(S)) <= limit;
  if (forced != nullptr && strcmp(forced, "columns,1") == 0) return 1;
  if (forced != nullptr && strcmp(forced, "columns,16") == 0) return backward || short_columns ? widest : 1;
  const bool fills = shape.outer * (shape.inner / widest) >= kThreadsAnSM * device_info().sms;
  return short_columns && fills ? widest : 1;
}

// The width of the split columns kernels' blocks, or 0 for the columns kernels: columns too few to fill every SM
// one a thread take blocks of up to 32 threads across (of `vector` columns each), narrowed while they make fewer
// than four blocks an SM. A forced plan "columns,split" takes them at any shape, the other "columns" plans never.
template <class S>
int split_column_width(SoftmaxShape shape, int vector) {
  const char* forced = getenv("ACTIVATIONS_SOFTMAX_PLAN");
  const bool force = forced != nullptr && strcmp(forced, "columns,split") == 0;
  if (forced != nullptr && strncmp(forced, "columns", 7) == 0 && !force) return 0;
  const int64_t sms = device_info().sms;
  if (!force && shape.outer * shape.inner >= kThreadsAnSM * sms) return 0;
  int64_t width = std::min<int64_t>(shape.inner, 32 * vector);
  const auto blocks = [&](int64_t w) { return shape.outer * ((shape.inner + w - 1) / w); };
  while (blocks(width) < 4 * sms && width % (2 * vector) == 0) width /= 2;
  return blocks(width) <= 0x7fffffff ? static_cast<int>(width) : 0;
}

template <class S, bool kBackward, int V>
const char* run_columns_kernel(bool log, SoftmaxShape shape, const S* pa, const S* pb, S* po, cudaStream_t stream) {
  const int64_t threads = shape.outer * (shape.inner / V);
  const auto blocks = static_cast<unsigned>((threads + kColumnThreads - 1) / kColumnThreads);
  if constexpr (kBackward) {
    columns_backward<S, V><<<blocks, kColumnThreads, 0, stream>>>(pa, pb, po, shape.outer, shape.n, shape.inner, log);
  } else {
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kColumnThreads, 0, stream>>>(pa, po, shape.outer, shape.n, shape.inner, log);
    };
    if constexpr (V == 1) {
      launch(columns_forward<S, V, 8>);
    } else if (shape.n <= 2 || V == 2) {  // n <= V (column_vector)
      launch(columns_forward<S, V, 2>);
    } else if (shape.n <= 4 || V == 4) {
      launch(columns_forward<S, V, std::min(V, 4)>);
    } else {
      launch(columns_forward<S, V, V>);
    }
  }
  return last_error();
}

template <class S, bool kBackward, int V>
const char* run_split_columns(bool log, SoftmaxShape shape, int width, const S* pa, const S* pb, S* po,
                              cudaStream_t stream) {
  const int64_t tiles = (shape.inner + width - 1) / width;
  const auto blocks = static_cast<unsigned>(shape.outer * tiles);
  if constexpr (kBackward) {
    split_columns_backward<S, V><<<blocks, kSplitColumnThreads, 0, stream>>>(pa, pb, po, shape.n, shape.inner, width,
                                                                              tiles, log);
  } else {
    split_columns_forward<S, V><<<blocks, kSplitColumnThreads, 0, stream>>>(pa, po, shape.n, shape.inner, width, tiles,
                                                                             log);
  }
  return last_error();
}

// Launches the tile kernel of kThreads threads a block, kChunk columns a copy.
template <class S, bool kBackward, int kThreads, int kChunk>
const char* run_tiles(bool log, SoftmaxShape shape, int width, const S* pa, const S* pb, S* po, cudaStream_t stream) {
  const int64_t tiles = (shape.inner + width - 1) / width;
  const int64_t shared = tile_bytes<S>(kBackward, log, shape.n, width);
  static bool ready[64] = {};
  if constexpr (kBackward) {
    const auto kernel = tiles_backward<S, kThreads, kChunk>;
    if (const char* error = allow_staging(kernel, ready, kTileStaticShared<S>)) return error;
    return launch(kernel, shape.outer * tiles, kThreads, 1, shared, stream, pa, pb, po, shape.n, shape.inner, width,
                  tiles, log);
  } else {
    const auto kernel = tiles_forward<S, kThreads, kChunk>;
    if (const char* error = allow_staging(kernel, ready, kTileStaticShared<S>)) return error;
    return launch(kernel, shape.outer * tiles, kThreads, 1, shared, stream, pa, po, shape.n, shape.inner, width, tiles,
                  log);
  }
}

template <class S, bool kBackward, int kThreads>
const char* run_tiles(int chunk, bool log, SoftmaxShape shape, int width, const S* pa, const S* pb, S* po,
                      cudaStream_t stream) {
  constexpr int kWide = 16 / sizeof(S);
  if (chunk == kWide) return run_tiles<S, kBackward, kThreads, kWide>(log, shape, width, pa, pb, po, stream);
  if constexpr (sizeof(S) == 2 && !kBackward) {
    if (chunk == 2) return run_tiles<S, kBackward, kThreads, 2>(log, shape, width, pa, pb, po, stream);
  }
  return run_tiles<S, kBackward, kThreads, 1>(log, shape, width, pa, pb, po, stream);
}

// Runs a call over columns (inner > 1): in tiles where they fit, else one thread a column.
template <class S, bool kBackward>
const char* run_columns(bool log, SoftmaxShape shape, const void* a, const void* b, void* out, cudaStream_t stream) {
  const S* pa = static_cast<const S*>(a);
  const S* pb = static_cast<const S*>(b);
  S* po = static_cast<S*>(out);
  if (const int width = plan_columns<S>(kBackward, log, shape, pa, pb, po)) {
    const int chunk = tile_chunk<S>(kBackward, shape, width, pa, pb, po);
    // A 16-bit log_softmax backward in 16-byte chunks runs 512 threads even where three tiles fit an SM (two blocks
    // run, by registers): over dim 1 of 1024^3 bfloat16 2.37 ms against 2.31 and 2.32, float16 2.36 against 2.31
    // (results/h100-2026-11-27/ab_tile_chunks_16bit.log); the 16-bit forwards and softmax's backward ran slower so.
    const bool few = tile_bytes<S>(kBackward, log, shape.n, width) > kTileBytes ||
                     (sizeof(S) == 2 && kBackward && log && chunk * sizeof(S) == 16);
    return few ? run_tiles<S, kBackward, kTileThreadsFew>(chunk, log, shape, width, pa, pb, po, stream)
               : run_tiles<S, kBackward, kTileThreadsThree>(chunk, log, shape, width, pa, pb, po, stream);
  }
  constexpr int kWide = 16 / sizeof(S);
  const int widest = shape.inner % kWide == 0 && on_grid(16, pa, pb, po) ? kWide : 1;
  if (const int width = split_column_width<S>(shape, widest)) {
    return widest == kWide ? run_split_columns<S, kBackward, kWide>(log, shape, width, pa, pb, po, stream)
                           : run_split_columns<S, kBackward, 1>(log, shape, width, pa, pb, po, stream);
  }
  if (column_vector<S>(kBackward, log, shape, widest) == kWide)
    return run_columns_kernel<S, kBackward, kWide>(log, shape, pa, pb, po, stream);
  return run_columns_kernel<S, kBackward, 1>(log, shape, pa, pb, po, stream);
}

template <class S>
int64_t workspace_bytes(bool backward, SoftmaxShape shape, const void* a, const void* b, const void* out) {
  if (shape.inner != 1 || shape.n == 0 || shape.outer == 0) return 0;
  // log picks among register configurations only, never the path: the workspace is the same for both.
  const Plan plan = plan_rows<S>(backward, false, shape.outer, shape.n, a, b, out);
  if (plan.path != Path::Split) return 0;
  // Two values a part (the forward's (max, sum); the backward uses one): the two kernels' parts of every row, or
  // two steps' parts, whichever is more (a refused cooperative launch falls back to the two kernels).
  const int64_t parts = std::max(shape.outer * plan.parts, 2 * plan.step_rows * plan.step_parts);
  return parts * 2 * static_cast<int64_t>(sizeof(typename Num<S>::C));
}

// One (storage type, direction)'s entry points, declared in softmax_launch.cuh; each generated unit
// softmax_<type>_<direction>.cu instantiates one pair (ACTIVATIONS_SOFTMAX_INSTANTIATE).
template <class S, bool kBackward>
int64_t softmax_workspace(SoftmaxShape shape, const void* a, const void* b, const void* out) {
  return workspace_bytes<S>(kBackward, shape, a, b, out);
}

template <class S, bool kBackward>
const char* softmax_run(bool log, SoftmaxShape shape, const void* a, const void* b, void* out, void* workspace,
                        void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (shape.inner == 1) return run_rows<S, kBackward>(log, shape.outer, shape.n, a, b, out, workspace, s);
  return run_columns<S, kBackward>(log, shape, a, b, out, s);
}

#define ACTIVATIONS_SOFTMAX_INSTANTIATE(S, kBackward)                                                          \
  template int64_t softmax_workspace<S, kBackward>(SoftmaxShape, const void*, const void*, const void*);     \
  template const char* softmax_run<S, kBackward>(bool, SoftmaxShape, const void*, const void*, void*, void*, void*);

}  // namespace softmax_cuda
}  // namespace activations
