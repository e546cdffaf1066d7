// Times variants of the float32 ReLU backward-from-mask kernel against a device copy of the same bytes, to find
// where the last few per cent of the float32 backward go (issue 3). Standalone: includes the real kernels.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels tools/relu_backward_variants.cu -o /tmp/variants && /tmp/variants
#include <cstdio>
#include <algorithm>
#include <vector>

#include "../kernels/activations_cuda.cu"
#include "cuda_check.h"

using namespace activations;

// Variant: 8 floats (one whole mask byte) per thread, as two 16-byte accesses; optionally streaming hints.
template <bool kStreaming, int kThreads>
__global__ void __launch_bounds__(kThreads)
    backward_8_per_thread(int64_t n, float* __restrict__ grad_in, const uint8_t* __restrict__ mask,
                          const float* __restrict__ grad_out) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (first + 8 > n) return;  // the probe uses a multiple of 8 elements
  const uint32_t bits = mask[first / 8];
  const float4* src = reinterpret_cast<const float4*>(grad_out + first);
  float4 a = kStreaming ? __ldcs(src) : src[0];
  float4 b = kStreaming ? __ldcs(src + 1) : src[1];
  a.x = (bits & 1u) ? a.x : 0.f;
  a.y = (bits & 2u) ? a.y : 0.f;
  a.z = (bits & 4u) ? a.z : 0.f;
  a.w = (bits & 8u) ? a.w : 0.f;
  b.x = (bits & 16u) ? b.x : 0.f;
  b.y = (bits & 32u) ? b.y : 0.f;
  b.z = (bits & 64u) ? b.z : 0.f;
  b.w = (bits & 128u) ? b.w : 0.f;
  float4* dst = reinterpret_cast<float4*>(grad_in + first);
  if (kStreaming) {
    __stcs(dst, a);
    __stcs(dst + 1, b);
  } else {
    dst[0] = a;
    dst[1] = b;
  }
}

// Variant: 4 floats per thread (as the real kernel), streaming loads and stores, block size kThreads.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    backward_4_streaming(int64_t n, float* __restrict__ grad_in, const uint8_t* __restrict__ mask,
                         const float* __restrict__ grad_out) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 4;
  if (first + 4 > n) return;
  const uint32_t bits = mask[first / 8] >> (first % 8);
  float4 a = __ldcs(reinterpret_cast<const float4*>(grad_out + first));
  a.x = (bits & 1u) ? a.x : 0.f;
  a.y = (bits & 2u) ? a.y : 0.f;
  a.z = (bits & 4u) ? a.z : 0.f;
  a.w = (bits & 8u) ? a.w : 0.f;
  __stcs(reinterpret_cast<float4*>(grad_in + first), a);
}

__global__ void copy_float4(int64_t n4, float4* __restrict__ out, const float4* __restrict__ in) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i < n4) out[i] = in[i];
}

template <class Launch>
float median_ms(Launch&& launch, int reps = 20) {
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(end));
    CHECK(cudaEventSynchronize(end));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    times.push_back(ms);
  }
  CHECK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  return times[reps / 2];
}

int main() {
  const int64_t n = 4096LL * 393216;  // the KernelBench shape
  float *grad_out, *grad_in;
  uint8_t* mask;
  CHECK(cudaMalloc(&grad_out, n * 4));
  CHECK(cudaMalloc(&grad_in, n * 4));
  CHECK(cudaMalloc(&mask, n / 8));
  CHECK(cudaMemset(grad_out, 0x3f, n * 4));
  CHECK(cudaMemset(mask, 0x5a, n / 8));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; float32 ReLU backward from a 1-bit mask, %lld elements\n", prop.name, (long long)n);

  const double copy_bytes = 2.0 * n * 4, backward_bytes = 2.0 * n * 4 + n / 8;
  const float copy_ms = median_ms([&] { CHECK(cudaMemcpyAsync(grad_in, grad_out, n * 4, cudaMemcpyDeviceToDevice)); });
  const float copy_kernel_ms =
      median_ms([&] { copy_float4<<<(n / 4 + 255) / 256, 256>>>(n / 4, (float4*)grad_in, (const float4*)grad_out); });
  const double copy_gbps = copy_bytes / copy_ms / 1e6;
  std::printf("%-44s %8.3f ms %7.0f GB/s\n", "cudaMemcpyAsync (the copy rate)", copy_ms, copy_gbps);
  std::printf("%-44s %8.3f ms %7.0f GB/s\n", "copy kernel, one float4 per thread", copy_kernel_ms,
              copy_bytes / copy_kernel_ms / 1e6);
  auto report = [&](const char* name, float ms) {
    const double gbps = backward_bytes / ms / 1e6;
    std::printf("%-44s %8.3f ms %7.0f GB/s %6.1f %% of copy\n", name, ms, gbps, 100.0 * gbps / copy_gbps);
  };
  report("shipped: 4 per thread (cuda_relu_backward)", median_ms([&] {
           const char* error = cuda_relu_backward(DType::Float32, grad_out, mask, grad_in, n, nullptr);
           if (error) std::printf("launch failed: %s\n", error);
         }));
  report("4 per thread, streaming, 256 threads", median_ms([&] {
           backward_4_streaming<256><<<(n / 4 + 255) / 256, 256>>>(n, grad_in, mask, grad_out);
         }));
  report("4 per thread, streaming, 512 threads", median_ms([&] {
           backward_4_streaming<512><<<(n / 4 + 511) / 512, 512>>>(n, grad_in, mask, grad_out);
         }));
  report("8 per thread, 256 threads", median_ms([&] {
           backward_8_per_thread<false, 256><<<(n / 8 + 255) / 256, 256>>>(n, grad_in, mask, grad_out);
         }));
  report("8 per thread, streaming, 256 threads", median_ms([&] {
           backward_8_per_thread<true, 256><<<(n / 8 + 255) / 256, 256>>>(n, grad_in, mask, grad_out);
         }));
  report("8 per thread, streaming, 128 threads", median_ms([&] {
           backward_8_per_thread<true, 128><<<(n / 8 + 127) / 128, 128>>>(n, grad_in, mask, grad_out);
         }));
  return 0;
}
