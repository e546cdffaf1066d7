// The configuration of a launch as thread-block clusters (cudaLaunchKernelEx, cudaOccupancyMaxActiveClusters):
// the softmax kernels' (softmax_kernels.cuh) and tools/cluster_occupancy.cu's. Pure CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include <stdint.h>

namespace activations {
namespace softmax_cuda {

// A launch of `blocks` blocks of `threads` with `shared` bytes of dynamic shared memory, as clusters of `cluster`
// blocks; `attribute` holds the cluster's shape.
struct ClusterLaunch {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1] = {};
  ClusterLaunch(int64_t blocks, int threads, int cluster, int64_t shared, cudaStream_t stream) {
    config.gridDim = dim3(static_cast<unsigned>(blocks));
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = static_cast<size_t>(shared);
    config.stream = stream;
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // config points into attribute
};

}  // namespace softmax_cuda
}  // namespace activations
