// The autograd layer and the vmap batching rule of softmax and log_softmax (softmax.cpp), after PyTorch's
// derivatives.yaml entries for _softmax, _log_softmax and their _backward_data:
//
//   softmax(x, dim)                      x: softmax_backward(grad, y, dim)       forward AD: softmax_backward(t, y)
//   log_softmax(x, dim)                  x: log_softmax_backward(grad, y, dim)   forward AD: t - sum(exp(y) * t)
//   softmax_backward(g, y, dim)          differentiable: where g or y needs a gradient or has a tangent, it is
//   log_softmax_backward(g, y, dim)      computed by torch's formula in differentiable torch ops instead (so double
//                                        backward, forward-over-reverse and every higher order follow from torch)
//
// A dtype argument that changes the input's dtype converts it first with Tensor.to, which autograd records.
// vmap: the operator on the tensor beneath, its batch dimension in front and `dim` shifted past it.
//
// Compiled as part of autograd.cpp's unit (included at its end, sharing needs_grad, has_tangent, current_vmap_level
// and batch_in_front): a unit of its own parsed torch's autograd headers again, 10-14 s of a 2-core cold build.
#include <c10/core/WrapDimMinimal.h>

#include <optional>

namespace activations {
namespace {

using at::Tensor;
using torch::jit::Stack;
namespace autograd = torch::autograd;

using Forward = Tensor(const Tensor&, int64_t, std::optional<at::ScalarType>);
using Backward = Tensor(const Tensor&, const Tensor&, int64_t);

template <bool kLog>
const c10::TypedOperatorHandle<Forward>& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kLog ? "activations::log_softmax" : "activations::softmax", "")
                             .typed<Forward>();
  return op;
}

template <bool kLog>
const c10::TypedOperatorHandle<Backward>& backward_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow(kLog ? "activations::log_softmax_backward" : "activations::softmax_backward", "")
          .typed<Backward>();
  return op;
}

template <bool kLog>
struct SoftmaxBackward : autograd::Node {
  int64_t dim = 0;
  autograd::SavedVariable output;

  std::string name() const override { return kLog ? "activations::LogSoftmaxBackward" : "activations::SoftmaxBackward"; }
  void release_variables() override { output.reset_data(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {backward_op<kLog>().call(grads[0], output.unpack(getptr()), dim)};
  }
};

template <bool kLog>
Tensor forward_autograd(c10::DispatchKeySet keys, const Tensor& x, int64_t dim, std::optional<at::ScalarType> dtype) {
  if (dtype.has_value() && *dtype != x.scalar_type()) return forward_op<kLog>().call(x.to(*dtype), dim, std::nullopt);
  const bool with_grad = needs_grad(x), with_tangent = has_tangent(x);
  Tensor y;
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    y = forward_op<kLog>().redispatch(keys & c10::after_ADInplaceOrView_keyset, x, dim, std::nullopt);
  }
  if (with_tangent) {
    const Tensor t = x._fw_grad(/*level=*/0);
    const Tensor jvp = kLog ? t.sub(y.exp().mul(t).sum(dim, /*keepdim=*/true)) : backward_op<false>().call(t, y, dim);
    y._set_fw_grad(jvp, /*level=*/0, /*is_inplace_op=*/false);
  }
  if (with_grad) {
    auto node = new_node<SoftmaxBackward<kLog>>(x);
    node->dim = dim;
    autograd::set_history(y, node);
    node->output = autograd::SavedVariable(y, /*is_output=*/true);
  }
  return y;
}

template <bool kLog>
Tensor backward_autograd(c10::DispatchKeySet keys, const Tensor& g, const Tensor& y, int64_t dim) {
  if (needs_grad(g) || needs_grad(y) || has_tangent(g) || has_tangent(y)) {
    return kLog ? g.sub(y.exp().mul(g.sum(dim, /*keepdim=*/true))) : y.mul(g.sub(g.mul(y).sum(dim, /*keepdim=*/true)));
  }
  const at::AutoDispatchBelowADInplaceOrView below;
  return backward_op<kLog>().redispatch(keys & c10::after_ADInplaceOrView_keyset, g, y, dim);
}

// vmap: softmax(x, dim, dtype) and *_backward(g, y, dim) on the tensors beneath, batch dimension in front
// (an unbatched operand expanded to the batch size), dim shifted by one. A sample that is a 0-d tensor gets a
// dimension of size 1 to reduce over.
void softmax_batched_kernel(const c10::OperatorHandle& op, Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const int64_t level = current_vmap_level();
  const auto& schema = op.schema();
  const size_t num_arguments = schema.arguments().size();
  const size_t num_tensors = schema.name().size() > 9 && schema.name().substr(schema.name().size() - 9) == "_backward"
                                 ? 2 : 1;  // the tensors come first, then dim
  std::vector<c10::IValue> arguments = torch::jit::pop(*stack, num_arguments);
  std::vector<Tensor> tensors(num_tensors);
  std::vector<std::optional<int64_t>> bdims(num_tensors);
  std::optional<int64_t> batch;
  for (size_t i = 0; i < num_tensors; ++i) {
    std::tie(tensors[i], bdims[i]) = at::functorch::unwrapTensorAtLevel(arguments[i].toTensor(), level);
    if (bdims[i]) batch = tensors[i].size(*bdims[i]);
  }
  if (!batch) {
    for (auto& argument : arguments) torch::jit::push(*stack, std::move(argument));
    return op.callBoxed(stack);
  }
  const int64_t rank = tensors[0].dim() - (bdims[0] ? 1 : 0);
  int64_t dim = c10::maybe_wrap_dim(arguments[num_tensors].toInt(), rank);
  for (size_t i = 0; i < num_tensors; ++i) {
    Tensor t = batch_in_front(tensors[i], bdims[i], *batch);
    if (rank == 0) t = t.unsqueeze(1);
    arguments[i] = t;
  }
  arguments[num_tensors] = dim + 1;
  for (auto& argument : arguments) torch::jit::push(*stack, std::move(argument));
  op.callBoxed(stack);
  Tensor out = torch::jit::pop(*stack).toTensor();
  if (rank == 0) out = out.squeeze(1);
  torch::jit::push(*stack, at::functorch::makeBatched(out, 0, level));
}

}  // namespace
}  // namespace activations

TORCH_LIBRARY_IMPL(activations, Autograd, m) {
  using namespace activations;
  m.impl("softmax", TORCH_FN(forward_autograd<false>));
  m.impl("log_softmax", TORCH_FN(forward_autograd<true>));
  m.impl("softmax_backward", TORCH_FN(backward_autograd<false>));
  m.impl("log_softmax_backward", TORCH_FN(backward_autograd<true>));
}

TORCH_LIBRARY_IMPL(activations, FuncTorchBatched, m) {
  using torch::CppFunction;
  for (const char* name : {"softmax", "log_softmax", "softmax_backward", "log_softmax_backward"}) {
    m.impl(name, CppFunction::makeFromBoxedFunction<&activations::softmax_batched_kernel>());
  }
}
