// CUDA entry points (kernels.h): each dispatches to the functor's launchers (cuda_kernels.cuh), which are
// compiled in units of their own.
#include "cuda_kernels.cuh"

namespace activations {

// CudaKernels<F> of a FunctorTag<F>.
template <template <class, bool> class F>
CudaKernels<F> kernels_of(FunctorTag<F>);

const char* cuda_forward(Functor functor, DType dtype, const double* args, const void* x, void* y, uint8_t* mask,
                         int64_t n, void* stream, Rows x_rows) {
  return with_functor(functor, [&](auto tag) {
    return decltype(kernels_of(tag))::forward(dtype, args, x, y, mask, n, stream, x_rows);
  });
}

const char* cuda_backward(Functor functor, DType dtype, const double* args, bool from_output, const void* grad_out,
                          const void* saved, void* grad_in, int64_t n, void* stream, Rows saved_rows) {
  return with_functor(functor, [&](auto tag) {
    return decltype(kernels_of(tag))::backward(dtype, args, from_output, grad_out, saved, grad_in, n, stream,
                                               saved_rows);
  });
}

const char* cuda_double_backward(Functor functor, DType dtype, const double* args, bool from_output,
                                 const void* grad_grad, const void* grad_out, const void* saved, void* out, int64_t n,
                                 void* stream) {
  return with_functor(functor, [&](auto tag) {
    return decltype(kernels_of(tag))::double_backward(dtype, args, from_output, grad_grad, grad_out, saved, out, n, stream);
  });
}

const char* cuda_mask_backward(DType dtype, double passing, double blocked, const void* grad_out, const uint8_t* mask,
                               void* grad_in, int64_t n, void* stream) {
  using namespace cuda_detail;
  return with_storage_type(dtype, [&](auto storage) {
    using S = decltype(storage);
    const MaskBackward<typename Storage<S>::compute> backward(passing, blocked);
    return launch<S>(n, aligned16(grad_out) && aligned16(grad_in), [&](auto vec, unsigned blocks) {
      mask_backward_kernel<decltype(vec)::value><<<blocks, kThreadsPerBlock, 0, (cudaStream_t)stream>>>(
          n, backward, static_cast<S*>(grad_in), mask, static_cast<const S*>(grad_out));
    });
  });
}

}  // namespace activations
