// The autograd layer of the operators in activations.cpp, wired by hand the way torch's generated VariableType
// kernels are: one Node per backward, fed the tensors it needs. (torch::autograd::Function<T> does this wiring
// generically, but instantiating it costs about 6 s of compile time and more per call.) The nodes call the
// operators below the autograd layer through the dispatcher, so the same code runs on real, fake and meta tensors.
//
// A translation unit of its own, built as a library of its own beside the operators' (activations.py): torch's
// autograd headers are the costliest part of a cold build after the dispatcher's, and the two units compile in
// parallel. Registered in C++ so a call costs one trip through the dispatcher (an autograd layer in Python would
// cost about as much again).

#ifndef AT_PER_OPERATOR_HEADERS  // see activations.cpp
#define AT_PER_OPERATOR_HEADERS
#endif
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "activations.cuh"
#include "layout.h"

namespace activations {
namespace {

using at::Tensor;

namespace autograd = torch::autograd;

template <class Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Signature>();
}

// A node holding `input`'s gradient edge. Nodes are held by std::shared_ptr up to torch 2.1x and by
// c10::intrusive_ptr later; getptr() says which.
template <class NodeType>
auto new_node(const Tensor& input) {
  using NodePtr = decltype(std::declval<autograd::Node&>().getptr());
  auto node = [] {
    if constexpr (std::is_same_v<NodePtr, std::shared_ptr<autograd::Node>>) {
      return std::make_shared<NodeType>();
    } else {
      return c10::make_intrusive<NodeType>();
    }
  }();
  node->set_next_edges(autograd::collect_next_edges(input));
  return node;
}

// Forward-mode AD (dual tensors) has no formula here: refuse it rather than drop the tangent.
void reject_forward_grad(const Tensor& x, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(!autograd::isFwGradDefined(x), "activations.", op,
                              ": forward-mode AD (a dual tensor input) is not supported");
}

// The strides of the memory order the kernels walk for x (see dense() in activations.cpp).
std::vector<c10::SymInt> walked_strides(const Tensor& x) {
  if (x.is_non_overlapping_and_dense()) return x.sym_strides().vec();
  std::vector<c10::SymInt> strides(x.dim(), c10::SymInt(1));
  for (int64_t d = x.dim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * x.sym_size(d + 1).max(1);
  return strides;
}

// Whether a backward may write its result into the incoming gradient instead of a new tensor, which saves
// allocating one (so a training step peaks lower than torch's, whose backward allocates it). Only when nothing
// else can see it: this reference is its only one (autograd handed it over: a gradient the caller passed in, kept
// by a hook, or sent to another node too has more) and no other tensor shares its memory (a view), it is not part
// of a graph itself (create_graph), and it is laid out densely (no expanded dimensions).
bool can_take_result(const Tensor& grad) {
  return grad.use_count() == 1 && grad.has_storage() && grad.storage().use_count() == 1 && !grad.requires_grad() &&
         !grad.is_inference() && grad.is_non_overlapping_and_dense();
}

// ReLU saves 1 bit per element (the mask, in the memory order the forward walked) instead of a full tensor.
struct ReluBackward : autograd::Node {
  autograd::SavedVariable mask;
  std::vector<c10::SymInt> walked;  // the strides of that memory order

  std::string name() const override { return "activations::ReluBackward"; }
  void release_variables() override { mask.reset_data(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    static const auto op = op_handle<Tensor(const Tensor&, const Tensor&)>("activations::relu_backward");
    static const auto inplace_op = op_handle<void(Tensor&, const Tensor&)>("activations::relu_backward_");
    Tensor grad = std::move(grads[0]);  // the only reference left here, unless someone else holds one
    if (!grad.defined()) return {Tensor()};
    grad = with_strides(grad, walked);
    if (!can_take_result(grad)) return {op.call(grad, mask.unpack())};
    inplace_op.call(grad, mask.unpack());
    return {grad};
  }
};

// ELU and SELU out of place save the input, as torch does. The derivative could be formed from the output
// instead (y + alpha * scale for x <= 0), which would let a following layer that keeps its input share the
// saved tensor, but the output has lost the information where elu flattens out: in bfloat16 at x = -3 that
// gradient is 4 % off, in float32 at x = -10 0.1 % off, where the input gives it to the output's precision.
// In place, the input is gone: the output is saved, as torch's elu_ does (and alpha < 0 cannot be
// differentiated: elu_backward says so).
struct EluBackward : autograd::Node {
  autograd::SavedVariable saved;
  double alpha = 1.0;
  double scale = 1.0;
  bool saved_is_output = false;

  std::string name() const override { return "activations::EluBackward"; }
  void release_variables() override { saved.reset_data(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    static const auto op =
        op_handle<Tensor(const Tensor&, const Tensor&, double, double, bool)>("activations::elu_backward");
    static const auto inplace_op =
        op_handle<void(Tensor&, const Tensor&, double, double, bool)>("activations::elu_backward_");
    Tensor grad = std::move(grads[0]);  // the only reference left here, unless someone else holds one
    if (!grad.defined()) return {Tensor()};
    const Tensor from = saved_is_output ? saved.unpack(getptr()) : saved.unpack();
    if (!can_take_result(grad) || !same_dense_layout(grad, from)) {
      return {op.call(grad, from, alpha, scale, saved_is_output)};
    }
    inplace_op.call(grad, from, alpha, scale, saved_is_output);
    return {grad};
  }
};

bool needs_grad(const Tensor& x) { return autograd::compute_requires_grad(x); }

// Runs `call(keys)`, an operator call below the autograd layer. `keys` are the dispatch keys that reached our
// autograd kernel: redispatching with what is left of them after autograd, as torch's generated autograd kernels
// do, goes straight to the next kernel (a fresh call would work the keys out again and repeat the profiler's
// bookkeeping).
template <class Call>
auto below_autograd(c10::DispatchKeySet keys, Call&& call) {
  const at::AutoDispatchBelowADInplaceOrView below;
  return call(keys & c10::after_ADInplaceOrView_keyset);
}

Tensor relu_autograd(c10::DispatchKeySet keys, const Tensor& x) {
  static const auto relu_op = op_handle<Tensor(const Tensor&)>("activations::relu");
  static const auto with_mask_op = op_handle<std::tuple<Tensor, Tensor>(const Tensor&)>("activations::relu_with_mask");
  reject_forward_grad(x, "relu");
  if (!needs_grad(x)) return below_autograd(keys, [&](auto below) { return relu_op.redispatch(below, x); });  // no mask
  auto node = new_node<ReluBackward>(x);
  auto [y, mask] = below_autograd(keys, [&](auto below) { return with_mask_op.redispatch(below, x); });
  autograd::set_history(y, node);
  node->mask = autograd::SavedVariable(mask, /*is_output=*/false);
  node->walked = y.sym_strides().vec();
  return y;
}

template <class Call>
Tensor elu_autograd_common(c10::DispatchKeySet keys, const Tensor& x, double alpha, double scale, const char* op,
                           Call&& call) {
  reject_forward_grad(x, op);
  if (!needs_grad(x)) return below_autograd(keys, call);
  auto node = new_node<EluBackward>(x);
  Tensor y = below_autograd(keys, call);
  autograd::set_history(y, node);
  node->saved = autograd::SavedVariable(x, /*is_output=*/false);
  node->alpha = alpha;
  node->scale = scale;
  return y;
}

Tensor elu_autograd(c10::DispatchKeySet keys, const Tensor& x, double alpha) {
  static const auto op = op_handle<Tensor(const Tensor&, double)>("activations::elu");
  return elu_autograd_common(keys, x, alpha, 1.0, "elu", [&](auto below) { return op.redispatch(below, x, alpha); });
}

Tensor selu_autograd(c10::DispatchKeySet keys, const Tensor& x) {
  static const auto op = op_handle<Tensor(const Tensor&)>("activations::selu");
  return elu_autograd_common(keys, x, kSeluAlpha, kSeluScale, "selu",
                             [&](auto below) { return op.redispatch(below, x); });
}

// In place: torch's checks (a leaf or a view of one cannot be overwritten), `call(keys, with_grad)` below autograd,
// the version bump that lets autograd notice when a tensor saved by an earlier operation was overwritten and,
// with grad, the new history (for a view, rebase_history routes the gradient through its base). Returns the node
// for the caller to fill with what the backward needs, or null without grad.
template <class NodeType, class Call>
auto inplace_autograd(c10::DispatchKeySet keys, Tensor& x, const char* op, Call&& call) {
  reject_forward_grad(x, op);
  const bool with_grad = needs_grad(x);
  autograd::check_inplace(x, with_grad);
  decltype(new_node<NodeType>(x)) node;
  if (with_grad) node = new_node<NodeType>(x);
  below_autograd(keys, [&](auto below) { call(below, with_grad); });
  autograd::increment_version(x);
  if (node) autograd::rebase_history(x, node);
  return node;
}

void relu_inplace_autograd(c10::DispatchKeySet keys, Tensor& x) {
  static const auto relu_op = op_handle<void(Tensor&)>("activations::relu_");
  static const auto with_mask_op = op_handle<Tensor(Tensor&)>("activations::relu_with_mask_");
  Tensor mask;
  auto node = inplace_autograd<ReluBackward>(keys, x, "relu_", [&](auto below, bool with_grad) {
    with_grad ? void(mask = with_mask_op.redispatch(below, x)) : relu_op.redispatch(below, x);
  });
  if (node) {
    node->mask = autograd::SavedVariable(mask, /*is_output=*/false);
    node->walked = walked_strides(x);
  }
}

template <class Call>
void elu_inplace_common(c10::DispatchKeySet keys, Tensor& x, double alpha, double scale, const char* op,
                        Call&& call) {
  auto node = inplace_autograd<EluBackward>(keys, x, op, [&](auto below, bool) { call(below); });
  if (node) {
    node->saved = autograd::SavedVariable(x, /*is_output=*/true, /*is_inplace_on_view=*/x.is_view());
    node->alpha = alpha;
    node->scale = scale;
    node->saved_is_output = true;
  }
}

void elu_inplace_autograd(c10::DispatchKeySet keys, Tensor& x, double alpha) {
  static const auto op = op_handle<void(Tensor&, double)>("activations::elu_");
  elu_inplace_common(keys, x, alpha, 1.0, "elu_", [&](auto below) { op.redispatch(below, x, alpha); });
}

void selu_inplace_autograd(c10::DispatchKeySet keys, Tensor& x) {
  static const auto op = op_handle<void(Tensor&)>("activations::selu_");
  elu_inplace_common(keys, x, kSeluAlpha, kSeluScale, "selu_", [&](auto below) { op.redispatch(below, x); });
}

}  // namespace
}  // namespace activations

using namespace activations;

TORCH_LIBRARY_IMPL(activations, Autograd, m) {
  m.impl("relu", &relu_autograd);
  m.impl("elu", &elu_autograd);
  m.impl("selu", &selu_autograd);
  m.impl("relu_", &relu_inplace_autograd);
  m.impl("elu_", &elu_inplace_autograd);
  m.impl("selu_", &selu_inplace_autograd);
}
