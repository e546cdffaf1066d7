// How many thread-block clusters of the staged softmax's shapes the GPU holds at once, and so how many of its SMs
// they leave idle: cudaOccupancyMaxActiveClusters for a kernel with the staged backward's launch bounds (512
// threads, two blocks an SM; the forward, built for three, differs only where parts are at most 64 KiB) and a row
// part's dynamic shared memory, per cluster size. Clusters are placed within a GPC: where a GPC's SMs are not a
// multiple of a cluster's, the rest stay idle while every row is that long.
//
//     nvcc -arch=sm_90 -o /tmp/cluster_occupancy tools/cluster_occupancy.cu && /tmp/cluster_occupancy
#include <cuda_runtime.h>
#include <stdio.h>

#include "../kernels/cluster_launch.cuh"

__global__ void __launch_bounds__(512, 2) staged_like(float* out) {
  extern __shared__ float part[];
  part[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out) out[blockIdx.x] = part[(threadIdx.x + 1) % 512];
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s: %d SMs, %zu bytes of shared memory a block at most\n", prop.name, prop.multiProcessorCount,
         prop.sharedMemPerBlockOptin);
  cudaFuncSetAttribute(staged_like, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const int part_kib[] = {48, 64, 96, 112};
  for (int kib : part_kib) {
    const size_t shared = size_t(kib) * 1024;
    cudaFuncSetAttribute(staged_like, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
    for (int cluster = 1; cluster <= 16; cluster *= 2) {
      const activations::softmax_cuda::ClusterLaunch launch(cluster * 1024, 512, cluster, shared, nullptr);
      int clusters = 0;
      const cudaError_t error = cudaOccupancyMaxActiveClusters(&clusters, staged_like, &launch.config);
      if (error != cudaSuccess) {
        printf("part %3d KiB, cluster %2d: %s\n", kib, cluster, cudaGetErrorString(error));
        cudaGetLastError();
        continue;
      }
      int blocks_per_sm = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, staged_like, 512, shared);
      const int blocks = clusters * cluster, capacity = blocks_per_sm * prop.multiProcessorCount;
      printf("part %3d KiB, cluster %2d: %4d clusters at once = %4d blocks of %4d the SMs hold (%d an SM): %5.1f %%\n",
             kib, cluster, clusters, blocks, capacity, blocks_per_sm, 100.0 * blocks / capacity);
    }
  }
  return 0;
}
