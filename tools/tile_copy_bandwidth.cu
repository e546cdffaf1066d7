// Tile copies over a [1024, 1024, rowbytes] tensor: how fast can it be read into shared-memory tiles of (R rows x
// Wb bytes) and written back, against a plain copy? Blocks of one (outer, segment) split the rows in `parts`,
// optionally as one cluster. With the argument "softmax": a stand-alone softmax forward over dim 1 of 1024^3 whose
// tiles (n rows x 64 bytes) are copied by cp.async 16 bytes at a time, reduced from shared memory and written 16
// bytes at a time (the prototype of kernels/softmax_kernels.cuh's chunked tiles_forward).
//     nvcc -O3 -arch=sm_90a -std=c++17 -o /tmp/tile_copy tools/tile_copy_bandwidth.cu
//     /tmp/tile_copy 4096; /tmp/tile_copy 2048; /tmp/tile_copy softmax
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g) : "memory");
}

template <int T, bool ASYNC>
__global__ void __launch_bounds__(T) tile_copy(const uint4* x, uint4* y, long N, long row16, int W16, int R, int segs,
                                               int parts, int csync) {
  extern __shared__ uint4 smem[];
  long b = blockIdx.x;
  int p = b % parts; b /= parts;
  int s = b % segs; long o = b / segs;
  int groups = T / W16;
  int lane = threadIdx.x % W16, group = threadIdx.x / W16;
  long base = o * N * row16 + (long)p * R * row16 + (long)s * W16 + lane;
  if (group < groups) {
    if (ASYNC) {
      for (int j = group; j < R; j += groups) cp16(&smem[j * W16 + lane], &x[base + j * row16]);
      asm volatile("cp.async.wait_all;" ::: "memory");
    } else {
#pragma unroll 8
      for (int j = group; j < R; j += groups) smem[j * W16 + lane] = x[base + j * row16];
    }
  }
  if (csync) cg::this_cluster().sync(); else __syncthreads();
  if (group < groups) {
#pragma unroll 8
    for (int j = group; j < R; j += groups) y[base + j * row16] = smem[j * W16 + lane];
  }
}

__global__ void plain_copy(const uint4* x, uint4* y, long n16) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n16; i += (long)gridDim.x * blockDim.x) y[i] = x[i];
}

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class S> __device__ __forceinline__ S st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class S, int E> struct alignas(16) Chunk { S v[E]; };

template <class S, int T, int MODE>
__global__ void __launch_bounds__(T) tile_fwd(const S* __restrict__ x, S* __restrict__ y, int n, long inner, int width, long tiles) {
  constexpr int E = 16 / sizeof(S);
  extern __shared__ __align__(16) unsigned char mem[];
  S* tile = reinterpret_cast<S*>(mem);
  __shared__ float partial[T];
  __shared__ float col_m[128], col_s[128];
  const int cpr = width / E;
  const long outer = blockIdx.x / tiles, first = (blockIdx.x % tiles) * (long)width;
  const long base = outer * n * inner + first;
  const int chunks = n * cpr;
  for (int c = threadIdx.x; c < chunks; c += T) {
    const int r = c / cpr, q = c % cpr;
    cp16(tile + r * width + q * E, x + base + r * inner + q * E);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x % width, group = threadIdx.x / width, groups = T / width;
  float m = -INFINITY;
  if (group < groups)
    for (int j = group; j < n; j += groups) m = fmaxf(m, ld(tile[j * width + lane]));
  partial[threadIdx.x] = m;
  __syncthreads();
  m = partial[lane];
  for (int k = 1; k < groups; ++k) m = fmaxf(m, partial[k * width + lane]);
  __syncthreads();
  float s = 0, lost = 0;
  if (group < groups)
    for (int j = group; j < n; j += groups) {
      const float term = __expf(ld(tile[j * width + lane]) - m) - lost;
      const float sum = s + term;
      lost = (sum - s) - term;
      s = sum;
    }
  partial[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x < width) {
    float r = partial[lane];
    for (int k = 1; k < groups; ++k) r += partial[k * width + lane];
    col_m[lane] = m;
    col_s[lane] = 1.0f / r;
  }
  __syncthreads();
  const int q = threadIdx.x % cpr;  // fixed: T % cpr == 0
  float mm[E], ss[E];
#pragma unroll
  for (int k = 0; k < E; ++k) { mm[k] = col_m[q * E + k]; ss[k] = col_s[q * E + k]; }
#pragma unroll 4
  for (int c = threadIdx.x; c < chunks; c += T) {
    const int r = c / cpr;
    const Chunk<S, E> v = *reinterpret_cast<const Chunk<S, E>*>(tile + r * width + q * E);
    Chunk<S, E> o;
#pragma unroll
    for (int k = 0; k < E; ++k) o.v[k] = st<S>(__expf(ld(v.v[k]) - mm[k]) * ss[k]);
    *reinterpret_cast<Chunk<S, E>*>(y + base + r * inner + q * E) = o;
  }
}


template <class F> float time_ms(F f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < 15; ++i) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
  std::sort(t.begin(), t.end());
  cudaError_t e = cudaGetLastError(); if (e) { printf("error %s\n", cudaGetErrorString(e)); exit(1); }
  return t[t.size() / 2];
}

template <int T, bool ASYNC>
void run(const uint4* x, uint4* y, long O, long N, long rowbytes, int Wb, int parts, bool cluster, double floor_ms) {
  int W16 = Wb / 16; int R = N / parts; long row16 = rowbytes / 16; int segs = rowbytes / Wb;
  size_t sm = (size_t)R * Wb;
  auto k = tile_copy<T, ASYNC>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  if (cluster && parts > 8) cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  long blocks = O * segs * parts;
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(T); cfg.dynamicSmemBytes = sm;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = parts; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
  cfg.attrs = at; cfg.numAttrs = cluster ? 1 : 0;
  int occ = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, T, sm);
  float ms = time_ms([&] { cudaLaunchKernelEx(&cfg, k, x, y, N, row16, W16, R, segs, parts, (int)cluster); });
  printf("rowbytes %5ld Wb %4d rows/block %5d parts %2d %-7s T %d %-5s smem %6zu KB occ %d  %.3f ms  %.1f %% of copy\n", rowbytes, Wb, R, parts,
         cluster ? "cluster" : "blocks", T, ASYNC ? "async" : "regs", sm / 1024, occ, ms, 100.0 * floor_ms / ms);
}

template <class S, int T>
void run_softmax(const char* name, long O, int n, long inner, int widthbytes, double floor_ms) {
  long elems = O * n * inner;
  S *x, *y; cudaMalloc(&x, elems * sizeof(S)); cudaMalloc(&y, elems * sizeof(S));
  cudaMemset(x, 0, elems * sizeof(S));
  int width = widthbytes / sizeof(S);
  long tiles = inner / width;
  size_t sm = (size_t)n * widthbytes;
  auto k = tile_fwd<S, T, 0>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  int occ = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, T, sm);
  float ms = time_ms([&] { k<<<O * tiles, T, sm>>>(x, y, n, inner, width, tiles); });
  printf("%-8s tile %3d B x %d rows, T %d, occ %d: %.3f ms  %.1f %% of copy\n", name, widthbytes, n, T, occ, ms, 100 * floor_ms / ms);
  cudaFree(x); cudaFree(y);
}

void softmax_main() {
  long bytes = 1024L * 1024 * 1024 * 4;
  uint4 *x, *y; cudaMalloc(&x, bytes); cudaMalloc(&y, bytes); cudaMemset(x, 0, bytes);
  float c4 = time_ms([&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); });
  float c2 = time_ms([&] { cudaMemcpyAsync(y, x, bytes / 2, cudaMemcpyDeviceToDevice); });
  cudaFree(x); cudaFree(y);
  printf("memcpy 4 GiB %.3f ms, 2 GiB %.3f ms\n", c4, c2);
  run_softmax<float, 512>("float32", 1024, 1024, 1024, 64, c4);
  run_softmax<float, 384>("float32", 1024, 1024, 1024, 64, c4);
  run_softmax<float, 256>("float32", 1024, 1024, 1024, 64, c4);
  run_softmax<float, 512>("float32", 1024, 1024, 1024, 32, c4);
  run_softmax<float, 512>("float32", 1024, 1024, 1024, 128, c4);
  run_softmax<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 64, c2);
  run_softmax<__nv_bfloat16, 384>("bfloat16", 1024, 1024, 1024, 64, c2);
  run_softmax<__nv_bfloat16, 256>("bfloat16", 1024, 1024, 1024, 64, c2);
  run_softmax<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 32, c2);
  run_softmax<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 128, c2);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "softmax") == 0) {
    softmax_main();
    return 0;
  }
  long O = 1024, N = 1024;
  long rowbytes = argc > 1 ? atol(argv[1]) : 4096;
  long bytes = O * N * rowbytes;
  uint4 *x, *y; cudaMalloc(&x, bytes); cudaMalloc(&y, bytes); cudaMemset(x, 0, bytes); cudaMemset(y, 0, bytes);
  float copy_ms = time_ms([&] { plain_copy<<<132 * 8, 512>>>(x, y, bytes / 16); });
  float memcpy_ms = time_ms([&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); });
  double floor_ms = std::min(copy_ms, memcpy_ms);
  printf("bytes %ld: plain copy %.3f ms (%.0f GB/s), memcpy %.3f ms\n", bytes, copy_ms, 2e-6 * bytes / copy_ms, memcpy_ms);
  struct C { int Wb, parts; bool cluster; };
  std::vector<C> cs = {{64, 1, false}, {128, 1, false}, {64, 2, false}, {128, 2, false}, {128, 4, false}, {256, 4, false},
                       {256, 8, false}, {512, 8, false}, {512, 16, false},
                       {128, 2, true}, {128, 4, true}, {256, 4, true}, {256, 8, true}, {512, 8, true}, {512, 16, true}};
  for (auto c : cs) {
    if (c.Wb > rowbytes) continue;
    run<512, false>(x, y, O, N, rowbytes, c.Wb, c.parts, c.cluster, floor_ms);
    run<512, true>(x, y, O, N, rowbytes, c.Wb, c.parts, c.cluster, floor_ms);
    run<384, false>(x, y, O, N, rowbytes, c.Wb, c.parts, c.cluster, floor_ms);
  }
}
