// CUDA kernels. Pure CUDA: no torch headers (see kernels.h). The math comes from activations.cuh; one generic
// kernel per role (forward, forward with mask, backward, double backward, mask backward). CudaKernels<F> holds
// one functor's launchers: each functor's are compiled in a unit of their own (activations.py generates
// cuda_<Functor>.cu, one line each), so that nvcc compiles them side by side; cuda_kernels.cu dispatches to them.
//
// Memory layout: every buffer is dense and walked in memory order, so element i of one operand pairs with
// element i of the others; but one input of the forward and backward kernels may lie in rows (Rows, kernels.h:
// RowIndex below). Each thread handles 16-byte vectors (4 float, 8 half/bfloat16, 2 double) when all
// pointers are 16-byte aligned, else single elements: one in the mask kernels, two in the elementwise kernel
// (kElementwisePacks); the grid's last block goes element by element. A full grid ran at the copy rate on the
// H100; grid-stride loops ran 6-12 % slower (DESIGN.md). Indices are 64-bit throughout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#pragma once

#include "cuda_storage.cuh"
#include "kernels.h"

namespace activations {
namespace cuda_detail {

// 128 threads a block: with two vectors a thread (kElementwisePacks), 256 held every float32 forward on the H200 to
// 96-97 % of the copy rate, 128 let them reach 98-100 %. The mask kernels ran alike with either.
constexpr int kThreadsPerBlock = 128;
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

// Where element i of an operand in rows (Rows) lies: row i / length by a 32-bit multiply-high, an add and a shift (as
// torch's IntDivider; exact for i < 2^31, which the caller ensures), where a 64-bit division is a subroutine of
// dozens of instructions on the GPU; column i % length.
struct RowIndex {
  int64_t length = 0, stride = 0;
  uint32_t magic = 0, shift = 0;

  static RowIndex of(const Rows& rows) {
    RowIndex index;
    index.length = rows.length;
    index.stride = rows.stride;
    if (rows.length > 0) {
      const uint64_t divisor = static_cast<uint64_t>(rows.length);
      while (index.shift < 32 && (uint64_t(1) << index.shift) < divisor) ++index.shift;
      const uint64_t above = (uint64_t(1) << index.shift) - divisor;  // 2^shift >= divisor
      index.magic = static_cast<uint32_t>((uint64_t(1) << 32) * above / divisor + 1);
    }
    return index;
  }
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    const uint32_t element = static_cast<uint32_t>(i);
    const uint32_t row = (__umulhi(element, magic) + element) >> shift;
    return static_cast<int64_t>(row) * stride + (i - static_cast<int64_t>(row) * length);
  }
};

// First element handled by this thread.
template <int kVec>
__device__ __forceinline__ int64_t first_element() {
  return (static_cast<int64_t>(blockIdx.x) * kThreadsPerBlock + threadIdx.x) * kVec;
}

// out[i] = op(in_0[i], ...) for 1 to 3 inputs, computed in the compute type and rounded once on store. Each
// thread takes kPacks vectors, kThreadsPerBlock vectors apart (each load instruction coalesced across the warp), and
// issues all their loads before it computes. kRowInput: the input (1: a, 2: b) that lies in `rows`, or 0; with
// vectors, its rows are whole vectors.
template <int kVec, class S, class Op, int kInputs, int kPacks, int kRowInput = 0>
__global__ void __launch_bounds__(kThreadsPerBlock)
    elementwise_kernel(int64_t n, Op op, S* __restrict__ out, const S* __restrict__ a, const S* __restrict__ b,
                       const S* __restrict__ c, RowIndex rows) {
  using St = Storage<S>;
  const auto at = [&](int input, int64_t i) { return input == kRowInput ? rows(i) : i; };
  const auto apply = [&](S va, S vb, S vc) {
    if constexpr (kInputs == 1) return St::store(op(St::load(va)));
    if constexpr (kInputs == 2) return St::store(op(St::load(va), St::load(vb)));
    if constexpr (kInputs == 3) return St::store(op(St::load(va), St::load(vb), St::load(vc)));
  };
  constexpr int64_t kPackStride = static_cast<int64_t>(kThreadsPerBlock) * kVec;  // between a thread's vectors
  const int64_t block_first = static_cast<int64_t>(blockIdx.x) * kPackStride * kPacks;
  const int64_t thread_first = block_first + static_cast<int64_t>(threadIdx.x) * kVec;
  if (block_first + kPackStride * kPacks <= n) {
    Pack<S, kVec> pa[kPacks], pb[kPacks], pc[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      pa[p] = load_pack<S, kVec>(a + at(1, thread_first + p * kPackStride));
      pb[p] = pc[p] = pa[p];
      if constexpr (kInputs >= 2) pb[p] = load_pack<S, kVec>(b + at(2, thread_first + p * kPackStride));
      if constexpr (kInputs >= 3) pc[p] = load_pack<S, kVec>(c + thread_first + p * kPackStride);
    }
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      Pack<S, kVec> result;
#pragma unroll
      for (int k = 0; k < kVec; ++k) result.v[k] = apply(pa[p].v[k], pb[p].v[k], pc[p].v[k]);
      store_pack<S, kVec>(out + thread_first + p * kPackStride, result);
    }
  } else {
    // The grid's last block, which may end inside a vector: element by element.
    for (int p = 0; p < kPacks; ++p) {
      const int64_t first = thread_first + p * kPackStride;
      for (int64_t i = first; i < first + kVec && i < n; ++i) {
        const S va = a[at(1, i)];
        out[i] = apply(va, kInputs >= 2 ? b[at(2, i)] : va, kInputs >= 3 ? c[i] : va);
      }
    }
  }
}

// y = f(x) and, packed 8 to a byte, the bit the backward needs (F::passes), for the piecewise-linear functors. kRows:
// x lies in `rows` (whole vectors), y and the mask in element order.
template <int kVec, class S, class F, bool kRows = false>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_mask_kernel(int64_t n, F f, S* __restrict__ y, uint8_t* __restrict__ mask, const S* __restrict__ x,
                        RowIndex rows) {
  using St = Storage<S>;
  const auto at = [&](int64_t i) { return kRows ? rows(i) : i; };
  const int64_t first = first_element<kVec>();
  uint32_t bits = 0;
  if (first + kVec <= n) {
    const Pack<S, kVec> in = load_pack<S, kVec>(x + at(first));
    Pack<S, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const auto v = St::load(in.v[k]);
      out.v[k] = St::store(f.forward(v));
      bits |= uint32_t(f.passes(v)) << k;
    }
    store_pack<S, kVec>(y + first, out);
  } else {
    for (int k = 0; first + k < n; ++k) {
      const auto v = St::load(x[at(first + k)]);
      y[first + k] = St::store(f.forward(v));
      bits |= uint32_t(f.passes(v)) << k;
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

// grad_in = grad_out * passing where the mask bit is set, grad_out * blocked elsewhere.
template <int kVec, class S>
__global__ void __launch_bounds__(kThreadsPerBlock)
    mask_backward_kernel(int64_t n, MaskBackward<typename Storage<S>::compute> backward, S* __restrict__ grad_in,
                         const uint8_t* __restrict__ mask, const S* __restrict__ grad_out) {
  using St = Storage<S>;
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
    for (int k = 0; k < kVec; ++k) out.v[k] = St::store(backward(St::load(g.v[k]), (bits >> k) & 1u));
    store_pack_streaming<S, kVec>(grad_in + first, out);
  } else {
    const uint32_t bits = uint32_t(*byte) >> shift;
    for (int k = 0; first + k < n; ++k)
      grad_in[first + k] = St::store(backward(St::load(grad_out[first + k]), (bits >> k) & 1u));
  }
}

// Launches kernel<kVec> with kVec = the 16-byte width when all pointers allow it, else 1; each thread takes
// kPacks vectors.
template <class S, int kPacks = 1, class Launch>
const char* launch(int64_t n, bool all_aligned, Launch&& kernel_for_width) {
  constexpr int kWide = 16 / sizeof(S);
  const int vec = all_aligned ? kWide : 1;
  const int64_t per_block = int64_t(kThreadsPerBlock) * vec * kPacks;
  const int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return "tensor too large for one launch";
  if (all_aligned) {
    kernel_for_width(std::integral_constant<int, kWide>{}, static_cast<unsigned>(blocks));
  } else {
    kernel_for_width(std::integral_constant<int, 1>{}, static_cast<unsigned>(blocks));
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Vectors a thread of elementwise_kernel takes. With one, the kernels with the most arithmetic fell below the copy
// rate on the H200 (4.3 TB/s, an H100's instruction rate). With two loads in flight before the math, the two builds
// alternating on the H200 (best of two rounds, 2^30.6 elements): float32 GELU forward 3.20 -> 3.04 ms, its tanh
// form 3.37 -> 3.16 forward and 4.65 -> 4.41 backward, softplus forward 3.35 -> 3.12, bfloat16 GELU forward 1.67 ->
// 1.51, bfloat16 mish forward 1.71 -> 1.62; the float32 sigmoid forward, at the copy rate either way, 3.00 -> 3.02,
// backwards within 0.3 %. Tried too: four a thread, at 64 threads a block, took the tanh form's and softplus'
// forwards to 3.02 ms but other cells up to 1.4 % slower and the mask kernels 20 % (at 128 threads: no faster than
// two); the two vectors side by side in memory instead of a block apart, 10-35 % slower.
constexpr int kElementwisePacks = 2;

// Whether rows of S (Rows) are whole 16-byte vectors wherever a 16-byte aligned pointer starts them.
template <class S>
bool rows_of_vectors(const Rows& rows) {
  constexpr int64_t kWide = 16 / sizeof(S);
  return rows.length % kWide == 0 && rows.stride % kWide == 0;
}

// out = op(a, b, c) elementwise (b, c: only the first kInputs are read). Scalar accesses only with kVectors
// false: the double backward is not worth its wide instantiations in build time. kRowInput: the input that lies in
// `rows` (1: a, 2: b), or 0.
template <class S, int kInputs, bool kVectors = true, int kRowInput = 0, class Op>
const char* launch_elementwise(int64_t n, Op op, void* out, const void* a, const void* b, const void* c,
                               void* stream, const Rows& rows = {}) {
  const bool all_aligned = kVectors && aligned16(out) && aligned16(a) && (kInputs < 2 || aligned16(b)) &&
                           (kInputs < 3 || aligned16(c)) && (kRowInput == 0 || rows_of_vectors<S>(rows));
  constexpr int kPacks = kVectors ? kElementwisePacks : 1;
  const RowIndex row_index = RowIndex::of(rows);
  return launch<S, kPacks>(n, all_aligned, [&](auto vec, unsigned blocks) {
    if constexpr (kVectors || decltype(vec)::value == 1) {
      elementwise_kernel<decltype(vec)::value, S, Op, kInputs, kPacks, kRowInput>
          <<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(n, op, static_cast<S*>(out), static_cast<const S*>(a),
                                                                  static_cast<const S*>(b), static_cast<const S*>(c),
                                                                  row_index);
    }
  });
}

}  // namespace cuda_detail

// One functor's launchers. Declared here and defined in cuda_launchers.cuh, which only the generated units
// cuda_<Functor>.cu include: nvcc compiles a template's kernels wherever its definition is visible, `extern
// template` or not, and cuda_kernels.cu, which saw them, took 26.6 s of a 28.4 s cold build on the H100 host
// (every functor's kernels a second time, in one unit) while each functor's unit took 4-6 s.
template <template <class, bool> class F>
struct CudaKernels {
  // The functor for storage type S: F<float, true> for 16-bit results (a cheaper formula may do).
  template <class S>
  using For = F<typename cuda_detail::Storage<S>::compute, cuda_detail::Storage<S>::k16Bit>;

  static const char* forward(DType dtype, const double* args, const void* x, void* y, uint8_t* mask, int64_t n,
                             void* stream, const Rows& x_rows);
  static const char* backward(DType dtype, const double* args, bool from_output, const void* grad_out,
                              const void* saved, void* grad_in, int64_t n, void* stream, const Rows& saved_rows);
  static const char* double_backward(DType dtype, const double* args, bool from_output, const void* grad_grad,
                                     const void* grad_out, const void* saved, void* out, int64_t n, void* stream);
};

}  // namespace activations
