// CUDA softmax and log_softmax, forward and backward (softmax.h): the kernels, included only by the generated
// units softmax_<type>_<direction>.cu, so that nvcc compiles them side by side (softmax_launch.cuh). Pure CUDA.
//
// Rows (inner == 1) take one of two paths, by length:
// - In registers: each row is read once into the registers of a warp, a block, or (sm_90+) a thread-block
//   cluster of up to 8 blocks of 1024 threads, whose blocks exchange the row's max and sum through distributed
//   shared memory. One read and one write per element (a backward: see regs_backward). Rows up to 32 x 32
//   elements per warp, 1024 x 48 per block (float32: 48 registers of data a thread), 8 x that per cluster
//   (393216: KernelBench's row).
//   Clusters serve the backward only: for the forward the two-pass path below ran faster (see plan_rows).
// - Longer rows (or rows past one block without clusters): two passes. Blocks reduce parts of a row to partial
//   (max, sum) pairs in a workspace, then each block combines its row's pairs and writes its part, reading it again.
// Columns (inner > 1): one thread per column, an online (max, compensated sum) pass, then the writing pass.
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
#include <type_traits>

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
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }

// The max that keeps a NaN (fmax would drop it, and a row with a NaN must give NaN everywhere).
template <class C>
__device__ __forceinline__ C max_nan(C a, C b) {
  return (a > b || a != a) ? a : b;
}

struct Max {
  template <class C>
  __device__ __forceinline__ C operator()(C a, C b) const { return max_nan(a, b); }
};
struct Sum {
  template <class C>
  __device__ __forceinline__ C operator()(C a, C b) const { return a + b; }
};

template <class S, int V>
struct alignas(sizeof(S) * V) Vec {
  S v[V];
};

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
  v = scratch[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) v = op(v, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return v;
}

// Over the blocks of the cluster: `v` is this block's value (the same in all its threads). Each block publishes
// it in its `slot`; thread 0 reads every block's in rank order (so all blocks get the same bits) and shares the
// result through `result`. The caller syncs the cluster once more before exiting, so that no block's shared
// memory goes away while another reads it.
template <class C, class Op>
__device__ __forceinline__ C cluster_reduce(C v, Op op, C* slot, C* result) {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) *slot = v;
  cluster.sync();
  if (threadIdx.x == 0) {
    C r = *cluster.map_shared_rank(slot, 0);
    for (unsigned b = 1; b < cluster.num_blocks(); ++b) r = op(r, *cluster.map_shared_rank(slot, b));
    *result = r;
  }
  __syncthreads();
  return *result;
#else
  __trap();
  return v;
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

__device__ __forceinline__ void cluster_exit_sync() {
#if ACTIVATIONS_SOFTMAX_CLUSTERS
  cg::this_cluster().sync();
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
// Rows in registers. A row is held by kRowThreads threads (x its cluster's blocks), E elements each, in V-wide
// vectors: thread `lane` of block `rank` holds elements rank * kRowThreads * E + (j * kRowThreads + lane) * V + k.
// Padding past the row's end reads as -inf (forward) or 0 (backward) and is never written.

template <class S, int V, int E, int kRowThreads, bool kCluster>
__global__ void __launch_bounds__(block_threads(kRowThreads))
    regs_forward(const S* __restrict__ x, S* __restrict__ y, int64_t rows, int64_t n, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  constexpr int kRowsPerBlock = block_threads(kRowThreads) / kRowThreads;
  __shared__ C scratch[32];
  __shared__ C slots[4];
  unsigned rank, blocks_per_row;
  cluster_position<kCluster>(rank, blocks_per_row);
  const int64_t row = static_cast<int64_t>(blockIdx.x / blocks_per_row) * kRowsPerBlock + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const bool in_rows = row < rows;
  const int64_t base = static_cast<int64_t>(rank) * kRowThreads * E;
  const S* xr = x + (in_rows ? row : 0) * n;
  C v[E];
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = base + (static_cast<int64_t>(j) * kRowThreads + lane) * V;
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
  m = RowReduce<kRowThreads, kCluster>::run(m, Max{}, scratch, &slots[0], &slots[1]);
  C s = 0;
  if (log) {
#pragma unroll
    for (int e = 0; e < E; ++e) s += exp_(v[e] - m);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      v[e] = exp_(v[e] - m);
      s += v[e];
    }
  }
  s = RowReduce<kRowThreads, kCluster>::run(s, Sum{}, scratch, &slots[2], &slots[3]);
  const C log_s = log ? log_(s) : C(0);
  S* yr = y + (in_rows ? row : 0) * n;
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = base + (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      Vec<S, V> p;
#pragma unroll
      for (int k = 0; k < V; ++k) p.v[k] = N::store(log ? (v[j * V + k] - m) - log_s : v[j * V + k] / s);
      *reinterpret_cast<Vec<S, V>*>(yr + i) = p;
    }
  }
  if constexpr (kCluster) cluster_exit_sync();
}

// The backward keeps one operand per element in registers, the one its second pass needs with the other: softmax
// keeps y and reads g again (grad_in = y * (g - sum(g y))); log_softmax, whose sum needs g alone, keeps g and
// reads y in the second pass only (grad_in = g - exp(y) sum(g)): one read of each. A second read of a short row
// comes from the L1 or L2 cache.
template <class S, int V, int E, int kRowThreads, bool kCluster>
__global__ void __launch_bounds__(block_threads(kRowThreads))
    regs_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t rows, int64_t n,
                  bool log) {
  using N = Num<S>;
  using C = typename N::C;
  constexpr int kRowsPerBlock = block_threads(kRowThreads) / kRowThreads;
  __shared__ C scratch[32];
  __shared__ C slots[2];
  unsigned rank, blocks_per_row;
  cluster_position<kCluster>(rank, blocks_per_row);
  const int64_t row = static_cast<int64_t>(blockIdx.x / blocks_per_row) * kRowsPerBlock + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const bool in_rows = row < rows;
  const int64_t base = static_cast<int64_t>(rank) * kRowThreads * E;
  const int64_t offset = (in_rows ? row : 0) * n;
  C keep[E];
  C d = 0;
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = base + (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      const Vec<S, V> pg = *reinterpret_cast<const Vec<S, V>*>(g + offset + i);
      if (log) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          keep[j * V + k] = N::load(pg.v[k]);
          d += keep[j * V + k];
        }
      } else {
        const Vec<S, V> py = *reinterpret_cast<const Vec<S, V>*>(y + offset + i);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          keep[j * V + k] = N::load(py.v[k]);
          d += N::load(pg.v[k]) * keep[j * V + k];
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) keep[j * V + k] = 0;
    }
  }
  d = RowReduce<kRowThreads, kCluster>::run(d, Sum{}, scratch, &slots[0], &slots[1]);
  const S* other = log ? y : g;
#pragma unroll
  for (int j = 0; j < E / V; ++j) {
    const int64_t i = base + (static_cast<int64_t>(j) * kRowThreads + lane) * V;
    if (in_rows && i < n) {
      const Vec<S, V> po = *reinterpret_cast<const Vec<S, V>*>(other + offset + i);
      Vec<S, V> p;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C o = N::load(po.v[k]), kept = keep[j * V + k];
        p.v[k] = N::store(log ? kept - exp_(o) * d : kept * (o - d));
      }
      *reinterpret_cast<Vec<S, V>*>(gi + offset + i) = p;
    }
  }
  if constexpr (kCluster) cluster_exit_sync();
}

// ---------------------------------------------------------------------------------------------------------------
// Long rows: block b works on part b % parts of row b / parts, `chunk` elements (a multiple of V).

constexpr int kSplitThreads = 512;

// Online (max, sum of exp(x - max)) over V values.
template <class C>
__device__ __forceinline__ void online_add(C& m, C& s, const C* v, int count) {
  C vm = v[0];
  for (int k = 1; k < count; ++k) vm = max_nan(vm, v[k]);
  const C nm = max_nan(m, vm);
  if (nm == -INFINITY) return;  // nothing but -inf so far: the sum stays 0
  s *= exp_(m - nm);            // 0 while m was -inf
  for (int k = 0; k < count; ++k) s += exp_(v[k] - nm);
  m = nm;
}

// (M, S) of pairs (m, s): M = max m, S = sum s * exp(m - M), across the block.
template <class C>
__device__ __forceinline__ void block_merge(C& m, C& s, C* scratch) {
  const C big = block_reduce<kSplitThreads>(m, Max{}, scratch);
  C scaled = (m == -INFINITY || big == -INFINITY) ? C(0) : s * exp_(m - big);
  if (s != s) scaled = s;
  s = block_reduce<kSplitThreads>(scaled, Sum{}, scratch);
  m = big;
}

template <class S, int V>
__global__ void __launch_bounds__(kSplitThreads)
    split_forward_partial(const S* __restrict__ x, int64_t n, int64_t chunk, int64_t parts, typename Num<S>::C* __restrict__ work) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts, begin = part * chunk, end = min(n, begin + chunk);
  const S* xr = x + row * n;
  C m = -INFINITY, s = 0;
  constexpr int kUnroll = 4;  // loads in flight per thread
  for (int64_t first = begin + threadIdx.x * V; first < end; first += kUnroll * kSplitThreads * V) {
    Vec<S, V> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + static_cast<int64_t>(u) * kSplitThreads * V;
      if (i < end) p[u] = *reinterpret_cast<const Vec<S, V>*>(xr + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (first + static_cast<int64_t>(u) * kSplitThreads * V < end) {
        C v[V];
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = N::load(p[u].v[k]);
        online_add(m, s, v, V);
      }
    }
  }
  block_merge(m, s, scratch);
  if (threadIdx.x == 0) {
    work[(row * parts + part) * 2] = m;
    work[(row * parts + part) * 2 + 1] = s;
  }
}

template <class S, int V>
__global__ void __launch_bounds__(kSplitThreads)
    split_forward_apply(const S* __restrict__ x, S* __restrict__ y, int64_t n, int64_t chunk, int64_t parts,
                        const typename Num<S>::C* __restrict__ work, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts, begin = part * chunk, end = min(n, begin + chunk);
  C m = -INFINITY, s = 0;
  if (threadIdx.x < parts) {
    m = work[(row * parts + threadIdx.x) * 2];
    s = work[(row * parts + threadIdx.x) * 2 + 1];
  }
  block_merge(m, s, scratch);
  const C log_s = log ? log_(s) : C(0);
  const S* xr = x + row * n;
  S* yr = y + row * n;
  for (int64_t i = begin + threadIdx.x * V; i < end; i += kSplitThreads * V) {
    const Vec<S, V> p = *reinterpret_cast<const Vec<S, V>*>(xr + i);
    Vec<S, V> q;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C v = N::load(p.v[k]);
      q.v[k] = N::store(log ? (v - m) - log_s : exp_(v - m) / s);
    }
    *reinterpret_cast<Vec<S, V>*>(yr + i) = q;
  }
}

template <class S, int V>
__global__ void __launch_bounds__(kSplitThreads)
    split_backward_partial(const S* __restrict__ g, const S* __restrict__ y, int64_t n, int64_t chunk, int64_t parts,
                           bool log,
                           typename Num<S>::C* __restrict__ work) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts, begin = part * chunk, end = min(n, begin + chunk);
  C d = 0;
  for (int64_t i = begin + threadIdx.x * V; i < end; i += kSplitThreads * V) {
    const Vec<S, V> pg = *reinterpret_cast<const Vec<S, V>*>(g + row * n + i);
    if (log) {
#pragma unroll
      for (int k = 0; k < V; ++k) d += N::load(pg.v[k]);
    } else {
      const Vec<S, V> py = *reinterpret_cast<const Vec<S, V>*>(y + row * n + i);
#pragma unroll
      for (int k = 0; k < V; ++k) d += N::load(pg.v[k]) * N::load(py.v[k]);
    }
  }
  d = block_reduce<kSplitThreads>(d, Sum{}, scratch);
  if (threadIdx.x == 0) work[row * parts + part] = d;
}

template <class S, int V>
__global__ void __launch_bounds__(kSplitThreads)
    split_backward_apply(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t n,
                         int64_t chunk, int64_t parts, const typename Num<S>::C* __restrict__ work, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  __shared__ C scratch[32];
  const int64_t row = blockIdx.x / parts, part = blockIdx.x % parts, begin = part * chunk, end = min(n, begin + chunk);
  C d = threadIdx.x < parts ? work[row * parts + threadIdx.x] : C(0);
  d = block_reduce<kSplitThreads>(d, Sum{}, scratch);
  for (int64_t i = begin + threadIdx.x * V; i < end; i += kSplitThreads * V) {
    const Vec<S, V> pg = *reinterpret_cast<const Vec<S, V>*>(g + row * n + i);
    const Vec<S, V> py = *reinterpret_cast<const Vec<S, V>*>(y + row * n + i);
    Vec<S, V> q;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C gk = N::load(pg.v[k]), yk = N::load(py.v[k]);
      q.v[k] = N::store(log ? gk - exp_(yk) * d : yk * (gk - d));
    }
    *reinterpret_cast<Vec<S, V>*>(gi + row * n + i) = q;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Columns (inner > 1): thread (o, i) reduces x[o, :, i]. Neighbouring threads read neighbouring columns.

constexpr int kColumnThreads = 256;

template <class S>
__global__ void __launch_bounds__(kColumnThreads)
    columns_forward(const S* __restrict__ x, S* __restrict__ y, int64_t outer, int64_t n, int64_t inner, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (t >= outer * inner) return;
  const int64_t offset = (t / inner) * n * inner + t % inner;
  // The online (max, sum) with the sum compensated (Kahan: `lost` holds what its additions rounded away): a column
  // adds its n terms one by one, and a plain sum's error grows with n (float64 log_softmax over dim 0 of
  // [600, 305] was 34 eps off, past the tests' bound of 32.5); the compensated one stays within a few ulp. The
  // terms are in [0, 1] or NaN, so no infinity enters the compensation. Branch-free, as the plain loop was: with a
  // branch around the rescaling (taken only when the max grows) the 1024 x 1024 x 1024 forward over dim 1 ran
  // 11-31 % slower.
  C m = -INFINITY, s = 0, lost = 0;
  for (int64_t j = 0; j < n; ++j) {
    const C v = N::load(x[offset + j * inner]);
    const C nm = max_nan(m, v);
    const bool none = nm == -INFINITY;              // nothing but -inf so far: the sum stays 0
    const C rescale = none ? C(1) : exp_(m - nm);  // 1 while the max stays, 0 while m was -inf, NaN after a NaN
    const C kept = s * rescale;
    const C term = (none ? C(0) : exp_(v - nm)) - lost * rescale;
    const C t = kept + term;
    lost = (t - kept) - term;
    s = t;
    m = nm;
  }
  const C log_s = log ? log_(s) : C(0);
  for (int64_t j = 0; j < n; ++j) {
    const C v = N::load(x[offset + j * inner]);
    y[offset + j * inner] = N::store(log ? (v - m) - log_s : exp_(v - m) / s);
  }
}

template <class S>
__global__ void __launch_bounds__(kColumnThreads)
    columns_backward(const S* __restrict__ g, const S* __restrict__ y, S* __restrict__ gi, int64_t outer, int64_t n,
                     int64_t inner, bool log) {
  using N = Num<S>;
  using C = typename N::C;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (t >= outer * inner) return;
  const int64_t offset = (t / inner) * n * inner + t % inner;
  C d = 0;
  for (int64_t j = 0; j < n; ++j) {
    const C gk = N::load(g[offset + j * inner]);
    d += log ? gk : gk * N::load(y[offset + j * inner]);
  }
  for (int64_t j = 0; j < n; ++j) {
    const C gk = N::load(g[offset + j * inner]), yk = N::load(y[offset + j * inner]);
    gi[offset + j * inner] = N::store(log ? gk - exp_(yk) * d : yk * (gk - d));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Host side: choosing a path and launching it.

struct DeviceInfo {
  int major = 0, sms = 1;
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
    known[device] = true;
  }
  return cache[device];
}

// The register configurations (forward and backward): threads per row and elements per thread. Blocks of 1024
// threads may form clusters of 2 to 8.
struct RegConfig {
  int threads, elements;
};
constexpr RegConfig kConfigs[] = {{32, 8}, {32, 32}, {256, 32}, {1024, 16}, {1024, 48}};
constexpr int kMaxCluster = 8;

// What a row-wise call runs: a register configuration (cluster > 1: a cluster of that many blocks), or the
// two-pass split into `parts` parts of `chunk` elements.
struct Plan {
  bool split = false;
  RegConfig config{0, 0};
  int cluster = 1;
  int64_t parts = 1, chunk = 0;
  int vec = 1;
};

template <class S>
Plan plan_rows(bool backward, int64_t rows, int64_t n, bool aligned) {
  Plan plan;
  plan.vec = aligned && (n * static_cast<int64_t>(sizeof(S))) % 16 == 0 ? 16 / static_cast<int>(sizeof(S)) : 1;
  const DeviceInfo device = device_info();
  // ACTIVATIONS_SOFTMAX_PLAN="threads,elements,cluster" (one of kConfigs) forces a register configuration where
  // it fits, "split" the two-pass path: for timing the alternatives (tools/softmax_plans.py), not for use.
  static const char* forced = getenv("ACTIVATIONS_SOFTMAX_PLAN");
  const bool force_split = forced != nullptr && strcmp(forced, "split") == 0;
  if (!std::is_same_v<S, double> && !force_split) {  // float64 (rarely fast-path material) takes the two-pass path
    const auto& configs = kConfigs;
    int threads = 0, elements = 0, cluster = 0;
    if (forced != nullptr && sscanf(forced, "%d,%d,%d", &threads, &elements, &cluster) == 3 &&
        static_cast<int64_t>(threads) * elements * cluster >= n && cluster >= 1 && cluster <= kMaxCluster &&
        (cluster == 1 || (threads == 1024 && device.major >= 9))) {
      for (const RegConfig& c : configs) {
        if (c.threads == threads && c.elements == elements) {
          plan.config = c;
          plan.cluster = cluster;
          return plan;
        }
      }
    }
    for (const RegConfig& c : configs) {
      if (static_cast<int64_t>(c.threads) * c.elements >= n) {
        plan.config = c;
        return plan;
      }
    }
    // Rows past one block: the forward takes the two-pass path, which ran faster on the H100 than a cluster of
    // blocks (tools/softmax_plans.py, 4096 x 393216 float32: 6.64 ms against 7.70; 4096 x 131072 bfloat16: 1.27
    // ms against 1.64), the backward a cluster (4096 x 393216 float32: 8.3 ms, 1.81x torch).
    if (backward && device.major >= 9) {
      for (int cluster = 2; cluster <= kMaxCluster; ++cluster) {
        for (const RegConfig& c : configs) {
          if (c.threads == 1024 && static_cast<int64_t>(c.threads) * c.elements * cluster >= n &&
              rows * cluster <= 0x7fffffff) {
            plan.config = c;
            plan.cluster = cluster;
            return plan;
          }
        }
      }
    }
  }
  plan.split = true;
  const int64_t step = static_cast<int64_t>(kSplitThreads) * plan.vec;
  const int64_t min_chunk = step * 4;
  const int64_t wanted_parts = std::max<int64_t>(1, (4 * device.sms + rows - 1) / rows);
  int64_t chunk = std::max(min_chunk, (n + wanted_parts - 1) / wanted_parts);
  chunk = (chunk + step - 1) / step * step;
  int64_t parts = (n + chunk - 1) / chunk;
  if (parts > kSplitThreads) {  // the apply pass combines one part per thread
    chunk = ((n + kSplitThreads - 1) / kSplitThreads + step - 1) / step * step;
    parts = (n + chunk - 1) / chunk;
  }
  plan.parts = parts;
  plan.chunk = chunk;
  return plan;
}

inline const char* last_error() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

// Launches kernel over `blocks` blocks of `threads`, as clusters of `cluster` blocks when cluster > 1.
template <class... KernelArgs, class... Args>
const char* launch(void (*kernel)(KernelArgs...), int64_t blocks, int threads, int cluster, cudaStream_t stream,
                   Args... args) {
  if (blocks > 0x7fffffff) return "too many rows for one launch";
  if (cluster == 1) {
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(args...);
    return last_error();
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  const cudaError_t error = cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
  return error == cudaSuccess ? last_error() : cudaGetErrorString(error);
}

// Calls fn(Kernel<S, V, E, T, kCluster>) for the plan's register configuration.
template <class S, int V, bool kBackward, class Fn>
const char* with_reg_kernel(const Plan& plan, Fn&& fn) {
  const auto pick = [&](auto e, auto t) -> const char* {
    constexpr int E = decltype(e)::value, T = decltype(t)::value;
    if constexpr (E % V != 0) {
      return "internal error: elements per thread not a multiple of the vector width";
    } else if constexpr (kBackward) {
      if constexpr (T == 1024) {
        if (plan.cluster > 1) return fn(regs_backward<S, V, E, T, true>);
      }
      return fn(regs_backward<S, V, E, T, false>);
    } else {
      if constexpr (T == 1024) {
        if (plan.cluster > 1) return fn(regs_forward<S, V, E, T, true>);
      }
      return fn(regs_forward<S, V, E, T, false>);
    }
  };
  using std::integral_constant;
#define ACTIVATIONS_SOFTMAX_CONFIG(T, E)           \
  if (plan.config.threads == T && plan.config.elements == E) \
    return pick(integral_constant<int, E>{}, integral_constant<int, T>{});
  ACTIVATIONS_SOFTMAX_CONFIG(32, 8)
  ACTIVATIONS_SOFTMAX_CONFIG(32, 32)
  ACTIVATIONS_SOFTMAX_CONFIG(256, 32)
  ACTIVATIONS_SOFTMAX_CONFIG(1024, 16)
  ACTIVATIONS_SOFTMAX_CONFIG(1024, 48)
#undef ACTIVATIONS_SOFTMAX_CONFIG
  return "internal error: unknown register configuration";
}

// Runs a row-wise call (forward: a = x, b unused; backward: a = grad_out, b = output).
template <class S, bool kBackward>
const char* run_rows(bool log, int64_t rows, int64_t n, const void* a, const void* b, void* out, void* workspace,
                     cudaStream_t stream) {
  const Plan plan = plan_rows<S>(kBackward, rows, n, aligned16(a) && (kBackward ? aligned16(b) : true) && aligned16(out));
  const S* pa = static_cast<const S*>(a);
  const S* pb = static_cast<const S*>(b);
  S* po = static_cast<S*>(out);
  using C = typename Num<S>::C;
  const auto with_vec = [&](auto vec) -> const char* {
    constexpr int V = decltype(vec)::value;
    if constexpr (std::is_same_v<S, double>) {
    } else if (!plan.split) {
      const int threads = block_threads(plan.config.threads);
      const int64_t rows_per_block = threads / plan.config.threads;
      const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block * plan.cluster;
      return with_reg_kernel<S, V, kBackward>(plan, [&](auto kernel) {
        if constexpr (kBackward) {
          return launch(kernel, blocks, threads, plan.cluster, stream, pa, pb, po, rows, n, log);
        } else {
          return launch(kernel, blocks, threads, plan.cluster, stream, pa, po, rows, n, log);
        }
      });
    }
    if (rows * plan.parts > 0x7fffffff) return "too many rows for one launch";
    const auto grid = static_cast<unsigned>(rows * plan.parts);
    C* work = static_cast<C*>(workspace);
    if constexpr (kBackward) {
      split_backward_partial<S, V><<<grid, kSplitThreads, 0, stream>>>(pa, pb, n, plan.chunk, plan.parts, log, work);
      split_backward_apply<S, V><<<grid, kSplitThreads, 0, stream>>>(pa, pb, po, n, plan.chunk, plan.parts, work, log);
    } else {
      split_forward_partial<S, V><<<grid, kSplitThreads, 0, stream>>>(pa, n, plan.chunk, plan.parts, work);
      split_forward_apply<S, V><<<grid, kSplitThreads, 0, stream>>>(pa, po, n, plan.chunk, plan.parts, work, log);
    }
    return last_error();
  };
  constexpr int kWide = 16 / sizeof(S);
  if (plan.vec == kWide) return with_vec(std::integral_constant<int, kWide>{});
  return with_vec(std::integral_constant<int, 1>{});
}

template <class S>
int64_t workspace_bytes(bool backward, SoftmaxShape shape, bool aligned) {
  if (shape.inner != 1 || shape.n == 0 || shape.outer == 0) return 0;
  const Plan plan = plan_rows<S>(backward, shape.outer, shape.n, aligned);
  return plan.split ? shape.outer * plan.parts * 2 * static_cast<int64_t>(sizeof(typename Num<S>::C)) : 0;
}

// One (storage type, direction)'s entry points, declared in softmax_launch.cuh; each generated unit
// softmax_<type>_<direction>.cu instantiates one pair (ACTIVATIONS_SOFTMAX_INSTANTIATE).
template <class S, bool kBackward>
int64_t softmax_workspace(SoftmaxShape shape, bool aligned) {
  return workspace_bytes<S>(kBackward, shape, aligned);
}

template <class S, bool kBackward>
const char* softmax_run(bool log, SoftmaxShape shape, const void* a, const void* b, void* out, void* workspace,
                        void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (shape.inner == 1) return run_rows<S, kBackward>(log, shape.outer, shape.n, a, b, out, workspace, s);
  const int64_t columns = shape.outer * shape.inner;
  const auto blocks = static_cast<unsigned>((columns + kColumnThreads - 1) / kColumnThreads);
  if constexpr (kBackward) {
    columns_backward<S><<<blocks, kColumnThreads, 0, s>>>(static_cast<const S*>(a), static_cast<const S*>(b),
                                                          static_cast<S*>(out), shape.outer, shape.n, shape.inner, log);
  } else {
    columns_forward<S><<<blocks, kColumnThreads, 0, s>>>(static_cast<const S*>(a), static_cast<S*>(out), shape.outer,
                                                         shape.n, shape.inner, log);
  }
  return last_error();
}

#define ACTIVATIONS_SOFTMAX_INSTANTIATE(S, kBackward)                                                          \
  template int64_t softmax_workspace<S, kBackward>(SoftmaxShape, bool);                                       \
  template const char* softmax_run<S, kBackward>(bool, SoftmaxShape, const void*, const void*, void*, void*, void*);

}  // namespace softmax_cuda
}  // namespace activations
