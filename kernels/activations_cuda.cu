// CUDA kernels. Pure CUDA: no torch headers (see cuda_launch.h). The math comes from activations.cuh.
//
// Memory layout: every buffer is dense and walked in memory order, so element i of one operand pairs with
// element i of the others. Each thread handles one 16-byte vector (4 float, 8 half/bfloat16, 2 double) when all
// pointers are 16-byte aligned, else one element; the last thread finishes a partial vector element by element.
// One vector per thread over a full grid ran at the copy rate on the H100; grid-stride loops ran 6-12 % slower
// (DESIGN.md). Indices are 64-bit throughout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "activations.cuh"
#include "cuda_launch.h"

namespace activations {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kWarpSize = 32;

// Storage type S -> compute type, with the widening load and the rounding store; k16Bit: results are rounded
// to a 16-bit type.
template <class S>
struct Storage {  // float and double: computed in their own type
  using compute = S;
  static constexpr bool k16Bit = false;
  static __device__ __forceinline__ S load(S v) { return v; }
  static __device__ __forceinline__ S store(S v) { return v; }
};
template <>
struct Storage<__half> {
  using compute = float;
  static constexpr bool k16Bit = true;
  static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Storage<__nv_bfloat16> {
  using compute = float;
  static constexpr bool k16Bit = true;
  static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

// kVec elements loaded or stored as one access (16 bytes for the wide case).
template <class S, int kVec>
struct alignas(sizeof(S) * kVec) Pack {
  S v[kVec];
};

template <class S, int kVec>
__device__ __forceinline__ Pack<S, kVec> load_pack(const S* p) {
  return *reinterpret_cast<const Pack<S, kVec>*>(p);
}
template <class S, int kVec>
__device__ __forceinline__ void store_pack(S* p, const Pack<S, kVec>& pack) {
  *reinterpret_cast<Pack<S, kVec>*>(p) = pack;
}

// Streaming (evict-first) access for data touched once, used by the ReLU backward: on the H100 a float32 variant
// with it ran at 98.9 % of the copy rate (tools/relu_backward_variants.cu; the shipped kernel, which also keeps
// both its loads in flight, 99.0 %; the two changes were not timed apart). The other kernels reach the copy rate
// without it.
template <class S, int kVec>
__device__ __forceinline__ Pack<S, kVec> load_pack_streaming(const S* p) {
  if constexpr (sizeof(Pack<S, kVec>) == 16) {
    const int4 raw = __ldcs(reinterpret_cast<const int4*>(p));
    Pack<S, kVec> pack;
    memcpy(&pack, &raw, sizeof(raw));
    return pack;
  } else {
    return load_pack<S, kVec>(p);
  }
}
template <class S, int kVec>
__device__ __forceinline__ void store_pack_streaming(S* p, const Pack<S, kVec>& pack) {
  if constexpr (sizeof(Pack<S, kVec>) == 16) {
    int4 raw;
    memcpy(&raw, &pack, sizeof(raw));
    __stcs(reinterpret_cast<int4*>(p), raw);
  } else {
    store_pack<S, kVec>(p, pack);
  }
}

// First element handled by this thread.
template <int kVec>
__device__ __forceinline__ int64_t first_element() {
  return (static_cast<int64_t>(blockIdx.x) * kThreadsPerBlock + threadIdx.x) * kVec;
}

template <bool kBinary, class S, class Op>
__device__ __forceinline__ S apply(const Op& op, S a, S b) {
  using St = Storage<S>;
  if constexpr (kBinary) {
    return St::store(op(St::load(a), St::load(b)));
  } else {
    return St::store(op(St::load(a)));
  }
}

// out[i] = op(a[i]) or op(a[i], b[i]).
template <int kVec, bool kBinary, class S, class Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    elementwise_kernel(int64_t n, Op op, S* __restrict__ out, const S* __restrict__ a, const S* __restrict__ b) {
  const int64_t first = first_element<kVec>();
  if (first + kVec <= n) {
    const Pack<S, kVec> pa = load_pack<S, kVec>(a + first);
    Pack<S, kVec> pb;
    if constexpr (kBinary) pb = load_pack<S, kVec>(b + first);
    Pack<S, kVec> result;
#pragma unroll
    for (int k = 0; k < kVec; ++k) result.v[k] = apply<kBinary>(op, pa.v[k], kBinary ? pb.v[k] : pa.v[k]);
    store_pack<S, kVec>(out + first, result);
  } else {
    for (int64_t i = first; i < n; ++i) out[i] = apply<kBinary>(op, a[i], kBinary ? b[i] : a[i]);
  }
}

// y = relu(x) and, packed 8 to a byte, the bit the backward needs (Relu::passes_gradient).
template <int kVec, class S>
__global__ void __launch_bounds__(kThreadsPerBlock)
    relu_forward_mask_kernel(int64_t n, S* __restrict__ y, uint8_t* __restrict__ mask, const S* __restrict__ x) {
  using St = Storage<S>;
  const Relu<typename St::compute> relu{};
  const int64_t first = first_element<kVec>();
  uint32_t bits = 0;
  if (first + kVec <= n) {
    const Pack<S, kVec> in = load_pack<S, kVec>(x + first);
    Pack<S, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const auto v = St::load(in.v[k]);
      out.v[k] = St::store(relu.forward(v));
      bits |= uint32_t(relu.passes_gradient(v)) << k;
    }
    store_pack<S, kVec>(y + first, out);
  } else {
    for (int k = 0; first + k < n; ++k) {
      const auto v = St::load(x[first + k]);
      y[first + k] = St::store(relu.forward(v));
      bits |= uint32_t(relu.passes_gradient(v)) << k;
    }
  }
  // One mask byte covers 8 / kVec consecutive threads of a warp: OR their bits together, and the first of them
  // writes the byte. Every thread of the warp reaches the shuffle (no early return above).
  constexpr int kLanesPerByte = 8 / kVec;
  const int lane = threadIdx.x % kWarpSize;
  bits <<= (lane % kLanesPerByte) * kVec;
#pragma unroll
  for (int offset = 1; offset < kLanesPerByte; offset *= 2) bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
  if (lane % kLanesPerByte == 0 && first < n) mask[first / 8] = static_cast<uint8_t>(bits);
}

// grad_in = grad_out where the mask bit is set, else 0.
template <int kVec, class S>
__global__ void __launch_bounds__(kThreadsPerBlock) relu_backward_mask_kernel(
    int64_t n, S* __restrict__ grad_in, const uint8_t* __restrict__ mask, const S* __restrict__ grad_out) {
  using St = Storage<S>;
  const Relu<typename St::compute> relu{};
  const int64_t first = first_element<kVec>();
  if (first >= n) return;
  // kVec divides 8: this thread's bits share one byte. The byte is read after the gradient in each branch, so
  // both loads are in flight at once (read before the branch, the gradient load waited for it: 96 % of the
  // copy rate instead of 99 % for float32).
  const uint8_t* byte = mask + first / 8;
  const int shift = first % 8;
  if (first + kVec <= n) {
    const Pack<S, kVec> g = load_pack_streaming<S, kVec>(grad_out + first);
    const uint32_t bits = uint32_t(*byte) >> shift;
    Pack<S, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = St::store(relu.backward(St::load(g.v[k]), (bits >> k) & 1u));
    store_pack_streaming<S, kVec>(grad_in + first, out);
  } else {
    const uint32_t bits = uint32_t(*byte) >> shift;
    for (int k = 0; first + k < n; ++k)
      grad_in[first + k] = St::store(relu.backward(St::load(grad_out[first + k]), (bits >> k) & 1u));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches kernel<kVec> with kVec = the 16-byte width when all pointers allow it, else 1.
template <class S, class Launch>
const char* launch(int64_t n, bool all_aligned, Launch&& kernel_for_width) {
  constexpr int kWide = 16 / sizeof(S);
  const int vec = all_aligned ? kWide : 1;
  const int64_t blocks = ((n + vec - 1) / vec + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > 0x7fffffff) return "tensor too large for one launch";
  if (all_aligned) {
    kernel_for_width(std::integral_constant<int, kWide>{}, static_cast<unsigned>(blocks));
  } else {
    kernel_for_width(std::integral_constant<int, 1>{}, static_cast<unsigned>(blocks));
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Calls fn(S{}) with the storage type S of dtype.
template <class Fn>
const char* with_storage_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(__half{});
    case DType::BFloat16: return fn(__nv_bfloat16{});
  }
  return "activations: unknown dtype code";
}

template <bool kBinary, class S, class Op>
const char* launch_elementwise(int64_t n, Op op, void* out, const void* a, const void* b, void* stream) {
  const bool all_aligned = aligned16(out) && aligned16(a) && (!kBinary || aligned16(b));
  return launch<S>(n, all_aligned, [&](auto vec, unsigned blocks) {
    elementwise_kernel<decltype(vec)::value, kBinary><<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(
        n, op, static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b));
  });
}

}  // namespace

const char* cuda_relu_forward(DType dtype, const void* x, void* y, uint8_t* mask, int64_t n, void* stream) {
  return with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    if (mask == nullptr) {
      return launch_elementwise<false, S>(n, Forward<Relu<typename Storage<S>::compute>>{}, y, x, nullptr, stream);
    }
    return launch<S>(n, aligned16(x) && aligned16(y), [&](auto vec, unsigned blocks) {
      relu_forward_mask_kernel<decltype(vec)::value><<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(
          n, static_cast<S*>(y), mask, static_cast<const S*>(x));
    });
  });
}

const char* cuda_relu_backward(DType dtype, const void* grad_out, const uint8_t* mask, void* grad_in, int64_t n,
                               void* stream) {
  return with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    return launch<S>(n, aligned16(grad_out) && aligned16(grad_in), [&](auto vec, unsigned blocks) {
      relu_backward_mask_kernel<decltype(vec)::value><<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(
          n, static_cast<S*>(grad_in), mask, static_cast<const S*>(grad_out));
    });
  });
}

const char* cuda_elu_forward(DType dtype, const void* x, void* y, int64_t n, double alpha, double scale,
                             void* stream) {
  return with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    const Elu<typename Storage<S>::compute, Storage<S>::k16Bit> elu(alpha, scale);
    return launch_elementwise<false, S>(n, Forward<decltype(elu)>{elu}, y, x, nullptr, stream);
  });
}

const char* cuda_elu_backward(DType dtype, const void* grad_out, const void* saved, void* grad_in, int64_t n,
                              double alpha, double scale, bool saved_is_output, void* stream) {
  return with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    const Elu<typename Storage<S>::compute> elu(alpha, scale);
    if (saved_is_output) {
      return launch_elementwise<true, S>(n, BackwardFromOutput<decltype(elu)>{elu}, grad_in, grad_out, saved, stream);
    }
    return launch_elementwise<true, S>(n, BackwardFromInput<decltype(elu)>{elu}, grad_in, grad_out, saved, stream);
  });
}

}  // namespace activations
