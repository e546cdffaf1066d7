// CUDA softmax and log_softmax (softmax.h): the entry points, dispatching on dtype to the per-(type, direction)
// instantiations in the generated units softmax_<type>_<direction>.cu (see softmax_launch.cuh).
#include "softmax_launch.cuh"

namespace activations {

using namespace softmax_cuda;

int64_t cuda_softmax_workspace_bytes(bool backward, DType dtype, SoftmaxShape shape, const void* a, const void* b,
                                     const void* out) {
  int64_t bytes = 0;
  with_storage_type(dtype, [&](auto storage) -> const char* {
    using S = decltype(storage);
    bytes = backward ? softmax_workspace<S, true>(shape, a, b, out) : softmax_workspace<S, false>(shape, a, b, out);
    return nullptr;
  });
  return bytes;
}

const char* cuda_softmax_forward(bool log, DType dtype, SoftmaxShape shape, const void* x, void* y, void* workspace,
                                 void* stream) {
  if (shape.outer * shape.n * shape.inner == 0) return nullptr;
  return with_storage_type(dtype, [&](auto storage) {
    return softmax_run<decltype(storage), false>(log, shape, x, nullptr, y, workspace, stream);
  });
}

const char* cuda_softmax_backward(bool log, DType dtype, SoftmaxShape shape, const void* grad_out,
                                  const void* output, void* grad_in, void* workspace, void* stream) {
  if (shape.outer * shape.n * shape.inner == 0) return nullptr;
  return with_storage_type(dtype, [&](auto storage) {
    return softmax_run<decltype(storage), true>(log, shape, grad_out, output, grad_in, workspace, stream);
  });
}

}  // namespace activations
