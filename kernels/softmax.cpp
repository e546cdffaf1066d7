// Softmax and log_softmax: the operators' schemas and their CPU, CUDA and Meta kernels (the CPU loops are in
// softmax_cpu.cpp, the CUDA kernels in softmax.cu, the autograd layer and batching rule in softmax_autograd.cpp).
//
//   softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor       as torch.softmax (input cast to dtype first)
//   log_softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor   as torch.log_softmax
//   softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor       y * (g - sum(g * y))
//   log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor   g - exp(y) * sum(g)
//
// The backward operators work from the forward's output, as torch's _softmax_backward_data does. Every result is
// contiguous; an input that is not is copied first.
//
// Compiled as part of activations.cpp's unit (included at its end, sharing its helpers: check_input, check_same,
// dtype_of, on_cuda): a unit of its own parsed torch's headers again, 8-10 s of a 2-core cold build.
#include <c10/core/WrapDimMinimal.h>

#include <algorithm>
#include <optional>

#include "softmax.h"

namespace activations {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------------------------
// Checks, shapes, devices

// [outer, n, inner] of a contiguous tensor reduced over dim (a 0-d tensor is one row of one element).
SoftmaxShape shape_of(const Tensor& t, int64_t dim) {
  SoftmaxShape shape{1, 1, 1};
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) shape.outer *= t.size(d);
    if (d == dim) shape.n = t.size(d);
    if (d > dim) shape.inner *= t.size(d);
  }
  return shape;
}

// Scratch memory for the CUDA kernels, from torch's allocator (empty when they need none).
Tensor cuda_workspace(const Tensor& like, int64_t bytes) {
  return at::empty({std::max<int64_t>(bytes, 0)}, like.options().dtype(at::kByte));
}

// ---------------------------------------------------------------------------------------------------------------
// The kernels (kCompute false: Meta, shapes only).

template <bool kCompute, bool kLog>
Tensor forward_kernel(const Tensor& input, int64_t dim, std::optional<at::ScalarType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  const Tensor converted = dtype.has_value() ? input.to(*dtype) : input;
  check_input(converted, op, "input", " (or pass dtype= to convert the input)");
  const int64_t d = c10::maybe_wrap_dim(dim, converted.dim());
  const Tensor x = converted.contiguous();
  Tensor y = new_output(x, /*contiguous=*/true);
  if constexpr (kCompute) {
    if (x.numel() == 0) return y;
    const SoftmaxShape shape = shape_of(x, d);
    const DType type = dtype_of(x);
    if (x.is_cuda()) {
      on_cuda(x, op, [&](auto stream) {
        const Tensor work = cuda_workspace(
            x, cuda_softmax_workspace_bytes(false, type, shape, x.const_data_ptr(), nullptr, y.const_data_ptr()));
        return cuda_softmax_forward(kLog, type, shape, x.const_data_ptr(), y.mutable_data_ptr(), work.data_ptr(),
                                    stream);
      });
    } else {
      cpu_softmax_forward(kLog, type, shape, x.const_data_ptr(), y.mutable_data_ptr());
    }
  }
  return y;
}

template <bool kCompute, bool kLog>
Tensor backward_kernel(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  const char* op = kLog ? "log_softmax_backward" : "softmax_backward";
  check_input(grad_output, op, "grad_output", " (or pass dtype= to convert the input)");
  check_input(output, op, "output", " (or pass dtype= to convert the input)");
  check_same(grad_output, output, op, "grad_output", "output");
  const int64_t d = c10::maybe_wrap_dim(dim, output.dim());
  const Tensor g = grad_output.contiguous(), y = output.contiguous();
  Tensor gi = new_output(y, /*contiguous=*/true);
  if constexpr (kCompute) {
    if (y.numel() == 0) return gi;
    const SoftmaxShape shape = shape_of(y, d);
    const DType type = dtype_of(y);
    if (y.is_cuda()) {
      on_cuda(y, op, [&](auto stream) {
        const Tensor work = cuda_workspace(y, cuda_softmax_workspace_bytes(true, type, shape, g.const_data_ptr(),
                                                                           y.const_data_ptr(), gi.const_data_ptr()));
        return cuda_softmax_backward(kLog, type, shape, g.const_data_ptr(), y.const_data_ptr(), gi.mutable_data_ptr(),
                                     work.data_ptr(), stream);
      });
    } else {
      cpu_softmax_backward(kLog, type, shape, g.const_data_ptr(), y.const_data_ptr(), gi.mutable_data_ptr());
    }
  }
  return gi;
}

// Boxed, as activations.cpp's kernels (the arguments taken from the stack): TORCH_FN's unboxing and schema-inference
// templates for these four kernels cost the 2-core cold build about 0.9 s (docs/performance.md, Build time).
template <bool kCompute, bool kLog>
void forward_boxed(const c10::OperatorHandle&, Stack* stack) {  // (x, dim, dtype)
  Tensor y = forward_kernel<kCompute, kLog>(torch::jit::peek(*stack, 0, 3).toTensor(),
                                            torch::jit::peek(*stack, 1, 3).toInt(),
                                            torch::jit::peek(*stack, 2, 3).toOptional<at::ScalarType>());
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(y));
}
template <bool kCompute, bool kLog>
void backward_boxed(const c10::OperatorHandle&, Stack* stack) {  // (grad_output, output, dim)
  Tensor grad_input = backward_kernel<kCompute, kLog>(torch::jit::peek(*stack, 0, 3).toTensor(),
                                                      torch::jit::peek(*stack, 1, 3).toTensor(),
                                                      torch::jit::peek(*stack, 2, 3).toInt());
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(grad_input));
}

template <bool kCompute>
void register_softmax_kernels(torch::Library& m) {
  using torch::CppFunction;
  m.impl("softmax", CppFunction::makeFromBoxedFunction<&forward_boxed<kCompute, false>>());
  m.impl("log_softmax", CppFunction::makeFromBoxedFunction<&forward_boxed<kCompute, true>>());
  m.impl("softmax_backward", CppFunction::makeFromBoxedFunction<&backward_boxed<kCompute, false>>());
  m.impl("log_softmax_backward", CppFunction::makeFromBoxedFunction<&backward_boxed<kCompute, true>>());
}

// softmax(x, dim, dtype) and log_softmax under CUDA autocast: dtype float32 where none is given and x is eligible
// (torch's "fp32_set_opt_dtype" policy for its softmax and log_softmax; see autocast_eligible).
void autocast_kernel(const c10::OperatorHandle& op, Stack* stack) {  // (x, dim, dtype)
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  c10::IValue& dtype = torch::jit::peek(*stack, 2, 3);
  if (dtype.isNone() && autocast_eligible(torch::jit::peek(*stack, 0, 3))) dtype = at::kFloat;
  op.callBoxed(stack);
}

}  // namespace
}  // namespace activations

TORCH_LIBRARY_FRAGMENT(activations, m) {
  m.def("softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
  m.def("log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(activations, CPU, m) { activations::register_softmax_kernels<true>(m); }
#ifdef ACTIVATIONS_WITH_CUDA
TORCH_LIBRARY_IMPL(activations, CUDA, m) { activations::register_softmax_kernels<true>(m); }
#endif
TORCH_LIBRARY_IMPL(activations, Meta, m) { activations::register_softmax_kernels<false>(m); }
TORCH_LIBRARY_IMPL(activations, AutocastCUDA, m) {
  for (const char* name : {"softmax", "log_softmax"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&activations::autocast_kernel>());
  }
}
