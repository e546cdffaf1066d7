// Tile copy: how fast can a [O, N, rowbytes] tensor be read into tiles of (R rows x Wb bytes) and written back,
// against a plain copy. Blocks of one (outer, segment) split the rows in `parts`, optionally as one cluster.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
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

int main(int argc, char** argv) {
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
