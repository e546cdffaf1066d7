// The definitions of CudaKernels<F> (cuda_kernels.cuh): one functor's launchers. Included only by the generated
// units cuda_<Functor>.cu, each of which instantiates one functor's (see CudaKernels for why nowhere else).
#pragma once

#include "cuda_kernels.cuh"

namespace activations {

// x_rows, saved_rows: where x or saved lies in rows (Rows), each launch takes the kernels that read it so.
template <template <class, bool> class F>
const char* CudaKernels<F>::forward(DType dtype, const double* args, const void* x, void* y, uint8_t* mask,
                                    int64_t n, void* stream, const Rows& x_rows) {
  using namespace cuda_detail;
  const bool in_rows = x_rows.length > 0;
  return with_storage_type(dtype, [&](auto storage) -> const char* {
    using S = decltype(storage);
    const For<S> f(args);
    if (mask == nullptr) {
      if (in_rows) {
        return launch_elementwise<S, 1, true, 1>(n, Forward<For<S>>{f}, y, x, nullptr, nullptr, stream, x_rows);
      }
      return launch_elementwise<S, 1>(n, Forward<For<S>>{f}, y, x, nullptr, nullptr, stream);
    }
    if constexpr (For<S>::kMask) {
      const RowIndex row_index = RowIndex::of(x_rows);
      const bool aligned = aligned16(x) && aligned16(y) && (!in_rows || rows_of_vectors<S>(x_rows));
      return launch<S>(n, aligned, [&](auto vec, unsigned blocks) {
        if (in_rows) {
          forward_mask_kernel<decltype(vec)::value, S, For<S>, true>
              <<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(n, f, static_cast<S*>(y), mask,
                                                                      static_cast<const S*>(x), row_index);
        } else {
          forward_mask_kernel<decltype(vec)::value><<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(
              n, f, static_cast<S*>(y), mask, static_cast<const S*>(x), row_index);
        }
      });
    }
    return "activations: this activation has no mask";
  });
}

template <template <class, bool> class F>
const char* CudaKernels<F>::backward(DType dtype, const double* args, bool from_output, const void* grad_out,
                                     const void* saved, void* grad_in, int64_t n, void* stream,
                                     const Rows& saved_rows) {
  using namespace cuda_detail;
  const bool in_rows = saved_rows.length > 0;
  return with_storage_type(dtype, [&](auto storage) -> const char* {
    using S = decltype(storage);
    using G = For<S>;  // grad * f'(x) is rounded to 16 bits as the forward's result is: the cheap formulas do
    const G f(args);
    const auto run = [&](auto op) {
      if (in_rows) {
        return launch_elementwise<S, 2, true, 2>(n, op, grad_in, grad_out, saved, nullptr, stream, saved_rows);
      }
      return launch_elementwise<S, 2>(n, op, grad_in, grad_out, saved, nullptr, stream);
    };
    if constexpr (G::kFromOutput) {
      if (from_output) return run(Backward<G, true>{f});
    }
    if constexpr (G::kFromInput) {
      if (!from_output) return run(Backward<G, false>{f});
    }
    return "activations: this activation has no backward from that saved tensor";
  });
}

template <template <class, bool> class F>
const char* CudaKernels<F>::double_backward(DType dtype, const double* args, bool from_output, const void* grad_grad,
                                            const void* grad_out, const void* saved, void* out, int64_t n,
                                            void* stream) {
  using namespace cuda_detail;
  return with_storage_type(dtype, [&](auto storage) -> const char* {
    using S = decltype(storage);
    using G = F<typename Storage<S>::compute, false>;
    const G f(args);
    if constexpr (G::kFromOutput) {
      if (from_output) {
        return launch_elementwise<S, 3, false>(n, DoubleBackward<G, true>{f}, out, grad_grad, grad_out, saved, stream);
      }
    }
    if constexpr (G::kFromInput) {
      if (!from_output) {
        return launch_elementwise<S, 3, false>(n, DoubleBackward<G, false>{f}, out, grad_grad, grad_out, saved, stream);
      }
    }
    return "activations: this activation has no double backward from that saved tensor";
  });
}

}  // namespace activations
