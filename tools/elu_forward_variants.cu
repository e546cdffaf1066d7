// Times variants of the float32 ELU/SELU forward at sizes where the data sits in the H100's L2 (2^20 ... 2^22
// elements) and beyond, kernel time only (CUDA graphs of back-to-back launches), to find why ours trailed torch's
// kernel there (issue 3); and the float32 ReLU forward with other block sizes and index types. Standalone: includes the real kernels. The accuracy line checks every variant on the
// device against double, specials and tiny and huge magnitudes included.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels tools/elu_forward_variants.cu -o /tmp/elu_variants && /tmp/elu_variants
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <random>
#include <vector>

#include "../kernels/activations_cuda.cu"
#include "cuda_check.h"

using namespace activations;

// Variants of the per-element math. The shipped one is Elu<float> (activations.cuh), whose negative side is
// expm1_nonpositive; before it took CUDA's expm1f (CudaExpm1f below).
struct Shipped {
  Elu<float> elu;
  __device__ float operator()(float x) const { return elu.forward(x); }
};
struct ShippedSelect {  // both sides computed, then a select
  Elu<float> elu;
  __device__ float operator()(float x) const {
    const float negative_side = elu.negative.times(expm1_nonpositive(x));
    const float positive_side = elu.positive.times(x);
    return x <= 0.0f ? negative_side : positive_side;
  }
};
struct CudaExpm1f {  // the same coefficients with CUDA's general expm1f: the kernel as it was before
  Elu<float> elu;
  __device__ float operator()(float x) const {
    return x <= 0.0f ? elu.negative.times(expm1f(x)) : elu.positive.times(x);
  }
};
struct TorchMath {  // torch's formula: coefficients rounded to float, plain products, expm1f
  float negative, positive;
  __device__ float operator()(float x) const { return x > 0.0f ? x * positive : expm1f(x) * negative; }
};
struct OwnExpm1PlainProducts {  // expm1_nonpositive with torch's plain products
  float negative, positive;
  __device__ float operator()(float x) const { return x <= 0.0f ? expm1_nonpositive(x) * negative : x * positive; }
};
struct Identity {
  __device__ float operator()(float x) const { return x; }
};

// Two 16-byte vectors per thread.
template <class Op>
__global__ void __launch_bounds__(256) two_vectors_kernel(int64_t n, Op op, float* __restrict__ out,
                                                           const float* __restrict__ in) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x) * 8;
  if (first + 8 > n) return;  // sizes here are multiples of 8
  float4 a = reinterpret_cast<const float4*>(in + first)[0];
  float4 b = reinterpret_cast<const float4*>(in + first)[1];
  a = {op(a.x), op(a.y), op(a.z), op(a.w)};
  b = {op(b.x), op(b.y), op(b.z), op(b.w)};
  reinterpret_cast<float4*>(out + first)[0] = a;
  reinterpret_cast<float4*>(out + first)[1] = b;
}

// The ReLU forward with the block size and index type as parameters: the shipped kernel is <256, int64_t>.
template <int kThreads, class Index>
__global__ void __launch_bounds__(kThreads)
    relu_kernel(Index n, float* __restrict__ out, const float* __restrict__ in) {
  const Index first = (static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x) * 4;
  if (first + 4 > n) return;  // sizes here are multiples of 4
  const Forward<Relu<float>> relu{};
  float4 a = *reinterpret_cast<const float4*>(in + first);
  a = {relu(a.x), relu(a.y), relu(a.z), relu(a.w)};
  *reinterpret_cast<float4*>(out + first) = a;
}

template <int kThreads, class Index>
struct ReluVariant {};

template <int kThreads, class Index>
void launch_one(int64_t n, ReluVariant<kThreads, Index>, float* out, const float* in, cudaStream_t stream, bool) {
  relu_kernel<kThreads, Index><<<static_cast<unsigned>((n / 4 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<Index>(n), out, in);
}

template <class Op>
void launch_one(int64_t n, Op op, float* out, const float* in, cudaStream_t stream, bool two_vectors) {
  if (two_vectors) {
    two_vectors_kernel<<<static_cast<unsigned>((n / 8 + 255) / 256), 256, 0, stream>>>(n, op, out, in);
  } else {
    elementwise_kernel<4, false, float><<<static_cast<unsigned>((n / 4 + 255) / 256), 256, 0, stream>>>(n, op, out, in,
                                                                                                   nullptr);
  }
}

// Median microseconds per launch: a graph of kLaunches back-to-back launches, replayed kReplays times.
template <class Op>
float time_us(int64_t n, Op op, float* out, const float* in, bool two_vectors) {
  constexpr int kLaunches = 50, kReplays = 21;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i) launch_one(n, op, out, in, stream, two_vectors);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> samples;
  for (int r = 0; r < kReplays; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1000 / kLaunches);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Largest error of the variant in float ulps against double expm1, over the inputs (written on the device).
template <class Op>
double max_ulp_error(const std::vector<float>& x, Op op, double alpha, double scale, float* d_out, const float* d_in,
                     bool two_vectors) {
  const int64_t n = static_cast<int64_t>(x.size());
  CHECK(cudaMemset(d_out, 0xff, n * sizeof(float)));  // poison: NaN everywhere
  launch_one(n, op, d_out, d_in, 0, two_vectors);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> y(n);
  CHECK(cudaMemcpy(y.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i];
    const double want = xi > 0 || std::isnan(xi) ? scale * xi : scale * alpha * std::expm1(xi);
    if (std::isnan(want) || std::isinf(want)) {
      if (!(std::isnan(want) ? std::isnan(y[i]) : y[i] == want)) return 1e30;
      continue;
    }
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(std::max(std::fabs(want), 1e-300)), -126) - 23);
    if (want == 0 && (y[i] != 0 || std::signbit(y[i]) != std::signbit(want))) return 1e30;
    worst = std::max(worst, std::fabs(y[i] - want) / ulp);
  }
  return worst;
}

int main() {
  const int64_t max_n = int64_t(1) << 25;
  float *in, *out;
  CHECK(cudaMalloc(&in, max_n * sizeof(float)));
  CHECK(cudaMalloc(&out, max_n * sizeof(float)));
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> host(max_n);
  for (auto& v : host) v = normal(rng);
  // Specials and wide magnitudes at the front, for the accuracy check.
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, -1e-45f, -20.0f, -17.5f, -88.0f,
                            -0.3465f, -0.3467f, 100.0f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i) host[i] = specials[i];
  std::uniform_real_distribution<float> exponent(-40.0f, 5.0f);
  for (int i = 16; i < (1 << 20); ++i) host[i] = -std::exp2(exponent(rng)) * (i % 3 == 0 ? -1 : 1);
  CHECK(cudaMemcpy(in, host.data(), max_n * sizeof(float), cudaMemcpyHostToDevice));

  const double alpha = kSeluAlpha, scale = kSeluScale;
  const Elu<float> elu(alpha, scale);
  const float neg = float(alpha * scale), pos = float(scale);
  std::vector<float> check(host.begin(), host.begin() + (1 << 20));
  std::printf("max error in float ulps (SELU constants, 2^20 inputs incl. specials and tiny/huge magnitudes):\n");
  std::printf("  shipped %.3f, shipped_select %.3f, cuda_expm1f %.3f, torch_math %.3f, own_plain %.3f, "
              "shipped x2 %.3f\n",
              max_ulp_error(check, Shipped{elu}, alpha, scale, out, in, false),
              max_ulp_error(check, ShippedSelect{elu}, alpha, scale, out, in, false),
              max_ulp_error(check, CudaExpm1f{elu}, alpha, scale, out, in, false),
              max_ulp_error(check, TorchMath{neg, pos}, alpha, scale, out, in, false),
              max_ulp_error(check, OwnExpm1PlainProducts{neg, pos}, alpha, scale, out, in, false),
              max_ulp_error(check, Shipped{elu}, alpha, scale, out, in, true));
  // Timing on normal(0, 1) inputs only.
  for (int i = 0; i < (1 << 20); ++i) host[i] = normal(rng);
  CHECK(cudaMemcpy(in, host.data(), (1 << 20) * sizeof(float), cudaMemcpyHostToDevice));

  std::printf("\nus per launch (median of 21 replays of a graph of 50 launches), float32, normal(0,1) input\n");
  std::printf("%-6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "n", "copy", "shipped", "ship_sel", "expm1f", "torch_m",
              "own_plain", "shipped2", "expm1f2");
  for (int log2n = 20; log2n <= 25; ++log2n) {
    const int64_t n = int64_t(1) << log2n;
    std::printf("2^%-4d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", log2n,
                time_us(n, Identity{}, out, in, false), time_us(n, Shipped{elu}, out, in, false),
                time_us(n, ShippedSelect{elu}, out, in, false), time_us(n, CudaExpm1f{elu}, out, in, false),
                time_us(n, TorchMath{neg, pos}, out, in, false),
                time_us(n, OwnExpm1PlainProducts{neg, pos}, out, in, false),
                time_us(n, Shipped{elu}, out, in, true), time_us(n, CudaExpm1f{elu}, out, in, true));
  }
  std::printf("\nReLU forward, us per launch: shipped (elementwise_kernel, 256 threads, 64-bit index) and variants\n");
  std::printf("%-6s %8s %8s %8s %8s %8s %8s\n", "n", "copy", "shipped", "256/i64", "256/i32", "128/i64", "128/i32");
  for (int log2n = 20; log2n <= 24; ++log2n) {
    const int64_t n = int64_t(1) << log2n;
    std::printf("2^%-4d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", log2n, time_us(n, Identity{}, out, in, false),
                time_us(n, Forward<Relu<float>>{}, out, in, false),
                time_us(n, ReluVariant<256, int64_t>{}, out, in, false),
                time_us(n, ReluVariant<256, int32_t>{}, out, in, false),
                time_us(n, ReluVariant<128, int64_t>{}, out, in, false),
                time_us(n, ReluVariant<128, int32_t>{}, out, in, false));
  }
  return 0;
}
