// Whether the GPU's reciprocals in kernels/activations.cuh give the bits of what they replace, for every float32 d
// their callers may pass, and NaN for NaN:
// - reciprocal_at_least_one, the division's fast path written out (rcp.approx and one Newton step by fma), against
//   __frcp_rn (the correctly rounded reciprocal) and 1.0f / d as nvcc compiles it, for d in [1, 2^126) (GELU's
//   1 + 0.34375 |x|, the sigmoid's 1 + e, mish's n + 2): 1,056,964,608 values;
// - reciprocal_for_16bit, one rcp.approx.ftz, against __fdividef(1.0f, d), for d in [1, inf].
// Prints the counts of d whose bits differ and the first one; exits 1 if any differ.
//     nvcc -O3 -arch=native -std=c++17 -o /tmp/reciprocal_exhaustive tools/reciprocal_exhaustive.cu
//     /tmp/reciprocal_exhaustive
#include <cstdint>
#include <cstdio>

#include "../kernels/activations.cuh"

struct Counts {
  unsigned long long differ_rn, differ_division, differ_16bit;
  uint32_t first_differ, first_differ_16bit;
  int nan_gives_nan;
};

__global__ void compare(uint32_t first_bits, uint32_t last_bits, uint32_t last_bits_16bit, Counts* counts) {
  for (uint64_t bits = first_bits + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; bits <= last_bits_16bit;
       bits += uint64_t(gridDim.x) * blockDim.x) {
    const float d = activations::float_from_bits(uint32_t(bits));
    if (bits < last_bits) {
      const uint32_t ours = activations::bits_of(activations::reciprocal_at_least_one(d));
      const bool rn = ours != activations::bits_of(__frcp_rn(d)), division = ours != activations::bits_of(1.0f / d);
      if (rn) atomicAdd(&counts->differ_rn, 1ull);
      if (division) atomicAdd(&counts->differ_division, 1ull);
      if (rn || division) atomicMin(&counts->first_differ, uint32_t(bits));
    }
    if (activations::bits_of(activations::reciprocal_for_16bit(d)) != activations::bits_of(__fdividef(1.0f, d))) {
      atomicAdd(&counts->differ_16bit, 1ull);
      atomicMin(&counts->first_differ_16bit, uint32_t(bits));
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const float nan = activations::float_from_bits(0x7fc00000u);
    const float r = activations::reciprocal_at_least_one(nan), r16 = activations::reciprocal_for_16bit(nan);
    counts->nan_gives_nan = r != r && r16 != r16;
  }
}

int main() {
  const uint32_t first_bits = 0x3f800000u, last_bits = 0x7e800000u, infinity = 0x7f800000u;  // 1, 2^126, inf
  Counts* counts;
  cudaMallocManaged(&counts, sizeof(Counts));
  *counts = {0, 0, 0, 0xffffffffu, 0xffffffffu, 0};
  compare<<<4096, 256>>>(first_bits, last_bits, infinity, counts);
  const cudaError_t error = cudaDeviceSynchronize();
  if (error != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(error));
    return 2;
  }
  cudaDeviceProp properties;
  cudaGetDeviceProperties(&properties, 0);
  printf("%s\nreciprocal_at_least_one, d in [1, 2^126), %u values: %llu differ from __frcp_rn, %llu from 1.0f / d",
         properties.name, last_bits - first_bits, counts->differ_rn, counts->differ_division);
  if (counts->differ_rn || counts->differ_division) printf(" (the first at bits %#010x)", counts->first_differ);
  printf("\nreciprocal_for_16bit, d in [1, inf], %u values: %llu differ from __fdividef(1.0f, d)",
         infinity - first_bits + 1, counts->differ_16bit);
  if (counts->differ_16bit) printf(" (the first at bits %#010x)", counts->first_differ_16bit);
  printf("\nNaN gives %s\n", counts->nan_gives_nan ? "NaN (both)" : "a number");
  return counts->differ_rn || counts->differ_division || counts->differ_16bit || !counts->nan_gives_nan;
}
