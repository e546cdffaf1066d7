// The autograd layer and the vmap batching rules of the operators in activations.cpp, for every row of the op
// table. Wired by hand the way torch's generated VariableType kernels are (one Node per backward, fed the tensors
// it needs), with PyTorch's derivatives.yaml as the model of what each operator's derivatives are:
//
//   NAME(x)                       x:           backward(grad, saved, ...)           forward AD: the same of x's tangent
//   backward(grad_output, saved)  grad_output: backward(grad, saved, ...)           (linear in grad_output)
//                                 saved:       double_backward(grad, grad_output, saved, ...)   (not for a mask)
//   double_backward(gg, g, saved) gg:          double_backward(grad, g, saved, ...)
//                                 g:           double_backward(grad, gg, saved, ...)
//                                 saved:       not supported (a third derivative): a clear error when asked for
//
// `saved` is what the table's row says the backward keeps: a 1-bit mask (piecewise-linear ops, whose second
// derivative is zero), the input, or the output. The nodes call the operators through the dispatcher, so the same
// code runs on real, fake and meta tensors, under torch.compile and under torch.func's transforms; and a backward
// computed with create_graph=True is itself differentiable. (torch::autograd::Function<T> does this wiring
// generically, but instantiating it costs about 6 s of compile time and more per call.)
//
// Part of activations.cpp's translation unit (included at its end): torch's autograd and functorch headers are the
// costliest part of a cold build, and they parse the dispatcher's headers that activations.cpp needs anyway (as a
// unit and a library of its own, the two parsed those twice: LIBRARIES in activations.py). Registered in C++ so a
// call costs one trip through the dispatcher (an autograd layer in Python would cost about as much again).

#ifndef AT_PER_OPERATOR_HEADERS  // see activations.cpp
#define AT_PER_OPERATOR_HEADERS
#endif
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>  // includes <nlohmann/json.hpp>: see nlohmann_json_stub.h
#include <ATen/functorch/PlumbingHelper.h>
#include <ATen/functorch/TensorWrapper.h>
#include <ATen/ops/_fw_primal.h>
#include <ATen/ops/add.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/movedim.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels.h"
#include "layout.h"
#include "op_args.h"

namespace activations {
namespace {

using at::Tensor;
using torch::jit::Stack;

namespace autograd = torch::autograd;

// ---------------------------------------------------------------------------------------------------------------
// Calling the internal operators through the dispatcher (with autograd: a backward is differentiable itself).

template <class Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Signature>();
}

using ArgsRef = c10::ArrayRef<double>;
using Str = c10::string_view;

const char* saved_as_name(Saves saves) {
  return saves == Saves::Mask ? "mask" : (saves == Saves::Input ? "input" : "output");
}

// What a node needs to call the internal operators for one activation.
struct Activation {
  const OpRow* row = nullptr;
  FunctorArgs args;
  Saves saves = Saves::Input;

  ArgsRef args_ref() const { return ArgsRef(args.data(), args.count); }

  Tensor backward(const Tensor& grad, const Tensor& saved) const {
    static const auto op = op_handle<Tensor(const Tensor&, const Tensor&, Str, ArgsRef, Str)>("activations::backward");
    return op.call(grad, saved, row->name, args_ref(), saved_as_name(saves));
  }
  void backward_into_grad(Tensor& grad, const Tensor& saved) const {
    static const auto op = op_handle<void(Tensor&, const Tensor&, Str, ArgsRef, Str)>("activations::backward_");
    op.call(grad, saved, row->name, args_ref(), saved_as_name(saves));
  }
  Tensor double_backward(const Tensor& grad_grad, const Tensor& grad, const Tensor& saved) const {
    static const auto op = op_handle<Tensor(const Tensor&, const Tensor&, const Tensor&, Str, ArgsRef, Str)>(
        "activations::double_backward");
    return op.call(grad_grad, grad, saved, row->name, args_ref(), saved_as_name(saves));
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Layout

// Whether t is wrapped by a torch.func transform (or is another tensor subclass): its layout cannot be set with
// empty_strided and copy_, and nothing may be written into it in place (torch's own backward formulas check
// areAnyTensorSubclassLike for the same reason).
bool is_wrapped(const Tensor& t) { return at::isTensorSubclassLike(t); }

// Whether the kernels run on x beneath a vmap: x is batched, or wraps (for torch.func's grad transforms) a batched
// tensor. The batching rule computes every sample contiguously there; a grad transform passes its tensors' layout
// on to the kernels.
bool beneath_vmap(Tensor x) {
  while (!at::functorch::isBatchedTensor(x)) {
    const auto* wrapper = at::functorch::maybeGetTensorWrapper(x);
    if (wrapper == nullptr) return false;
    x = wrapper->value();
  }
  return true;
}

// The strides of the memory order the kernels walk for x: x's own when it is dense, else those of a dense tensor
// in x's memory order (MemoryOrder in activations.cpp); beneath a vmap every sample is contiguous.
std::vector<c10::SymInt> walked_strides(const Tensor& x) {
  if (!beneath_vmap(x)) {
    return x.is_non_overlapping_and_dense() ? x.sym_strides().vec() : dense_strides(x, memory_order(x));
  }
  std::vector<int64_t> contiguous(x.dim());
  std::iota(contiguous.begin(), contiguous.end(), 0);
  return dense_strides(x, contiguous);
}

// The mask holds the bits in the memory order `walked` describes (a dense layout): the gradient must be laid out
// in that order before the mask backward reads it. For a wrapped gradient, whose strides cannot be chosen, its
// dimensions are permuted into that order and made contiguous, and the result permuted back.
template <class Backward>
Tensor in_mask_order(Tensor grad, const std::vector<c10::SymInt>& walked, Backward&& backward) {
  if (!is_wrapped(grad)) {
    grad = with_strides(grad, walked);
    return backward(std::move(grad));  // handed over: backward may write into it (see can_take_result)
  }
  std::vector<int64_t> order(grad.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return walked[a] > walked[b]; });
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return backward(grad.permute(order).contiguous()).permute(inverse);
}

// The mask backward of grad, in any layout: laid out first in the order `walked` the mask holds its bits in.
Tensor mask_backward(const Activation& activation, const Tensor& grad, const Tensor& mask,
                     const std::vector<c10::SymInt>& walked) {
  return in_mask_order(grad, walked, [&](const Tensor& g) { return activation.backward(g, mask); });
}

// Whether a backward may write its result into the incoming gradient instead of a new tensor, which saves
// allocating one (so a training step peaks lower than torch's, whose backward allocates it). Only when nothing
// else can see it: this reference is its only one (autograd handed it over: a gradient the caller passed in, kept
// by a hook, or sent to another node too has more) and no other tensor shares its memory (a view), it is not part
// of a graph itself (create_graph, which also enables grad mode here), no transform wraps it, and it is laid out
// densely (no expanded dimensions).
bool can_take_result(const Tensor& grad) {
  return grad.use_count() == 1 && grad.has_storage() && grad.storage().use_count() == 1 && !grad.requires_grad() &&
         !c10::GradMode::is_enabled() && !grad.is_inference() && grad.is_non_overlapping_and_dense() &&
         !is_wrapped(grad) && !autograd::isFwGradDefined(grad);
}

// ---------------------------------------------------------------------------------------------------------------
// Nodes

// A node holding the gradient edges of `inputs` (undefined ones get none). Nodes are held by std::shared_ptr up to
// torch 2.1x and by c10::intrusive_ptr later; getptr() says which.
template <class NodeType, class... Inputs>
auto new_node(const Inputs&... inputs) {
  using NodePtr = decltype(std::declval<autograd::Node&>().getptr());
  auto node = [] {
    if constexpr (std::is_same_v<NodePtr, std::shared_ptr<autograd::Node>>) {
      return std::make_shared<NodeType>();
    } else {
      return c10::make_intrusive<NodeType>();
    }
  }();
  node->set_next_edges(autograd::collect_next_edges(inputs...));
  return node;
}

// The derivative of a piecewise-linear op's backward with respect to its input: zero. A node for it keeps the
// input in the graph of a backward computed with create_graph=True, as torch's threshold_backward does (its
// formula for `self` is zeros_like(grad)), so that differentiating that backward again with respect to the input
// gives zeros, not an error that the input was not used.
struct ZeroDerivative : autograd::Node {
  std::string name() const override { return "activations::ZeroDerivative"; }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    return {grads[0].defined() ? at::zeros_like(grads[0]) : Tensor()};
  }
};

// The backward of NAME and NAME_: grad * f'(saved).
struct ActivationBackward : autograd::Node {
  Activation activation;
  autograd::SavedVariable saved;
  std::vector<c10::SymInt> walked;  // a mask's memory order

  std::string name() const override { return std::string("activations::") + activation.row->name + "_backward"; }
  void release_variables() override { saved.reset_data(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    Tensor grad = std::move(grads[0]);  // the only reference left here, unless someone else holds one
    if (!grad.defined()) return {Tensor()};
    const Tensor from = activation.saves == Saves::Output ? saved.unpack(getptr()) : saved.unpack();
    if (activation.saves == Saves::Mask) {
      Tensor result = in_mask_order(std::move(grad), walked, [&](Tensor g) {
        if (!can_take_result(g)) return activation.backward(g, from);
        activation.backward_into_grad(g, from);
        return g;
      });
      if (c10::GradMode::is_enabled() && next_edge(0).is_valid()) {  // create_graph: keep the input in the graph
        auto zero_node = new_node<ZeroDerivative>();
        Tensor zero = at::zeros_like(result);
        zero_node->set_next_edges({next_edge(0)});
        autograd::set_history(zero, std::move(zero_node));
        result = at::add(result, zero);
      }
      return {result};
    }
    // A saved tensor with a tangent (an in-place op's output under forward AD) makes the gradient carry one too:
    // backward_, which writes into grad, cannot.
    if (!can_take_result(grad) || !same_dense_layout(grad, from) || autograd::isFwGradDefined(from)) {
      return {activation.backward(grad, from)};
    }
    activation.backward_into_grad(grad, from);
    return {grad};
  }
};

// The backward of `backward` (grad_output and saved's gradients). grad_output's gradient is the backward applied
// to the incoming gradient, which for a mask is first laid out in the mask's order, as grad_output was (`walked`):
// a gradient in another layout (or not dense: the gradient of a sum) read in its own memory order would meet
// other elements' bits.
struct BackwardBackward : autograd::Node {
  Activation activation;
  autograd::SavedVariable grad_output;  // only where saved's gradient is needed
  autograd::SavedVariable saved;
  std::vector<c10::SymInt> walked;  // a mask's memory order

  std::string name() const override { return std::string("activations::") + activation.row->name + "_backward_backward"; }
  void release_variables() override {
    grad_output.reset_data();
    saved.reset_data();
  }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    const Tensor& grad = grads[0];
    if (!grad.defined()) return {Tensor(), Tensor()};
    const Tensor s = saved.unpack();
    autograd::variable_list result(2);
    if (task_should_compute_output(0)) {
      result[0] = activation.saves == Saves::Mask ? mask_backward(activation, grad, s, walked)
                                                  : activation.backward(grad, s);
    }
    if (task_should_compute_output(1)) result[1] = activation.double_backward(grad, grad_output.unpack(), s);
    return result;
  }
};

[[noreturn]] void third_derivative_not_supported(const OpRow& row) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "activations.", row.name, ": derivatives of order three and higher with respect",
                              " to the input are not supported (the second derivative is; gradients with respect to",
                              " the incoming gradients are too)");
}

// The backward of `double_backward` (= grad_grad * grad_output * f''(saved)).
struct DoubleBackwardBackward : autograd::Node {
  Activation activation;
  autograd::SavedVariable grad_grad, grad_output, saved;

  std::string name() const override {
    return std::string("activations::") + activation.row->name + "_double_backward_backward";
  }
  void release_variables() override {
    grad_grad.reset_data();
    grad_output.reset_data();
    saved.reset_data();
  }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    const Tensor& grad = grads[0];
    if (!grad.defined()) return {Tensor(), Tensor(), Tensor()};
    if (task_should_compute_output(2)) third_derivative_not_supported(*activation.row);
    const Tensor s = saved.unpack();
    autograd::variable_list result(3);
    if (task_should_compute_output(0)) result[0] = activation.double_backward(grad, grad_output.unpack(), s);
    if (task_should_compute_output(1)) result[1] = activation.double_backward(grad, grad_grad.unpack(), s);
    return result;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Autograd kernels (boxed: one for every row of the table)

bool needs_grad(const Tensor& x) { return x.defined() && autograd::compute_requires_grad(x); }
bool has_tangent(const Tensor& x) { return x.defined() && autograd::isFwGradDefined(x); }

// x's tangent and primal (the primal without its tangent, as torch's formulas use it).
Tensor tangent(const Tensor& x) { return x._fw_grad(/*level=*/0); }
Tensor primal(const Tensor& x) { return has_tangent(x) ? x._fw_primal(/*level=*/0) : x; }

// Runs `call(keys)`, an operator call below the autograd layer. `keys` are the dispatch keys that reached our
// autograd kernel: redispatching with what is left of them after autograd, as torch's generated autograd kernels
// do, goes straight to the next kernel.
template <class Call>
auto below_autograd(c10::DispatchKeySet keys, Call&& call) {
  const at::AutoDispatchBelowADInplaceOrView below;
  return call(keys & c10::after_ADInplaceOrView_keyset);
}

const auto& forward_with_mask_op() {
  static const auto op =
      op_handle<std::tuple<Tensor, Tensor>(const Tensor&, Str, ArgsRef)>("activations::forward_with_mask");
  return op;
}
const auto& forward_with_mask_inplace_op() {
  static const auto op = op_handle<Tensor(Tensor&, Str, ArgsRef)>("activations::forward_with_mask_");
  return op;
}

// The activation an operator call is for: NAME(x, params) / NAME_(x!, params) by the operator's row, or the
// internal forward_with_mask(x, activation, args) / forward_with_mask_.
bool is_forward_with_mask(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return name == "activations::forward_with_mask" || name == "activations::forward_with_mask_";
}
Activation called_activation(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments) {
  if (is_forward_with_mask(op)) {
    return Activation{&op_row(arguments[1].toStringRef()), functor_args(arguments[2].toDoubleVector()), Saves::Mask};
  }
  const OpRow& row = op_row(op.schema().name());
  return Activation{&row, functor_args(row, &arguments[1]), row.saves};
}

// NAME(x, params) -> y, and forward_with_mask(x, activation, args) -> (y, mask), which the autograd kernels of
// outer levels of torch.func transforms reach (hessian = jacfwd(jacrev(f)) differentiates what jacrev's level
// called below its autograd layer).
void forward_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  const Tensor x = torch::jit::peek(*stack, 0, num_arguments).toTensor();
  const bool with_grad = needs_grad(x);
  const bool with_tangent = has_tangent(x);
  if (!with_grad && !with_tangent) {  // the inference path: no mask, nothing saved
    return below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
  }
  // A copy of the arguments: the call below takes them off the stack.
  const std::vector<c10::IValue> arguments(torch::jit::last(*stack, num_arguments).begin(),
                                           torch::jit::last(*stack, num_arguments).end());
  const Activation activation = called_activation(op, arguments);
  Tensor y, mask;
  if (activation.saves == Saves::Mask) {
    std::tie(y, mask) = below_autograd(keys, [&](auto below) {
      return forward_with_mask_op().redispatch(below, x, activation.row->name, activation.args_ref());
    });
    torch::jit::drop(*stack, num_arguments);
  } else {
    below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
    y = torch::jit::pop(*stack).toTensor();
  }
  decltype(new_node<ActivationBackward>(x)) node;
  if (with_grad) {
    node = new_node<ActivationBackward>(x);
    autograd::set_history(y, node);
  }
  if (with_tangent) {
    // y' = f'(x) x': the backward applied to the tangent.
    const Tensor& t = tangent(x);
    Tensor y_tangent;
    if (activation.saves == Saves::Mask) {
      y_tangent = mask_backward(activation, t, mask, walked_strides(y));
    } else {
      y_tangent = activation.backward(t, activation.saves == Saves::Output ? y : primal(x));
    }
    y._set_fw_grad(y_tangent, /*level=*/0, /*is_inplace_op=*/false);
  }
  if (node) {  // saved last, as torch's generated kernels do: a saved output keeps its tangent
    node->activation = activation;
    if (activation.saves == Saves::Mask) {
      node->saved = autograd::SavedVariable(mask, /*is_output=*/false);
      node->walked = walked_strides(y);
    } else {
      const bool is_output = activation.saves == Saves::Output;
      node->saved = autograd::SavedVariable(is_output ? y : x, is_output);
    }
  }
  torch::jit::push(*stack, std::move(y));
  if (is_forward_with_mask(op)) torch::jit::push(*stack, std::move(mask));
}

// NAME_(x!, params) -> (). torch's checks (a leaf or a view of one cannot be overwritten), the op below autograd,
// the version bump that lets autograd notice when a tensor saved by an earlier operation was overwritten and,
// with grad, the new history (for a view, rebase_history routes the gradient through its base). What the backward
// keeps: the mask; else the output where the functor works from it (as torch's elu_, sigmoid_, tanh_); else a copy
// of the input made before it is overwritten (as torch does for silu_ and mish_).
void forward_inplace_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  Tensor x = torch::jit::peek(*stack, 0, num_arguments).toTensor();
  const bool with_grad = needs_grad(x);
  const bool with_tangent = has_tangent(x);
  autograd::check_inplace(x, with_grad);
  if (!with_grad && !with_tangent) {
    below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
    autograd::increment_version(x);
    return;
  }
  const std::vector<c10::IValue> arguments(torch::jit::last(*stack, num_arguments).begin(),
                                           torch::jit::last(*stack, num_arguments).end());
  Activation activation = called_activation(op, arguments);
  const OpRow& row = *activation.row;
  if (activation.saves == Saves::Input) {
    with_functor(row.functor, [&](auto tag) {
      if (decltype(tag)::template type<double>::kFromOutput) activation.saves = Saves::Output;
    });
  }
  // The input, for a backward that needs it: a copy made before it is overwritten, recorded by autograd (as
  // torch's original_self), so that the double backward reaches x through it.
  const Tensor original = activation.saves == Saves::Input ? x.clone() : Tensor();
  const Tensor x_tangent = with_tangent ? tangent(x) : Tensor();
  decltype(new_node<ActivationBackward>(x)) node;
  if (with_grad) node = new_node<ActivationBackward>(x);
  Tensor mask;
  if (activation.saves == Saves::Mask) {
    mask = below_autograd(keys, [&](auto below) {
      return forward_with_mask_inplace_op().redispatch(below, x, row.name, activation.args_ref());
    });
    torch::jit::drop(*stack, num_arguments);
  } else {
    below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
  }
  autograd::increment_version(x);
  std::vector<c10::SymInt> walked = activation.saves == Saves::Mask ? walked_strides(x) : std::vector<c10::SymInt>();
  if (node) autograd::rebase_history(x, node);
  if (with_tangent) {
    // The new tangent is computed from a copy where grad mode is on, as torch's generated in-place kernels do: the
    // graph of a tangent that requires grad (a layer's weights under torch.func.jvp) would save x_tangent itself,
    // which the copy_ below overwrites (its backward then refused) and which would hold itself through that graph
    // (never freed).
    const Tensor from = c10::GradMode::is_enabled() ? x_tangent.clone() : x_tangent;
    Tensor new_tangent;
    if (activation.saves == Saves::Mask) {
      new_tangent = mask_backward(activation, from, mask, walked);
    } else {
      new_tangent = activation.backward(from, activation.saves == Saves::Output ? primal(x) : primal(original));
    }
    // x keeps its tangent tensor, updated in place (as torch's generated in-place kernels do).
    x_tangent.copy_(new_tangent);
  }
  if (node) {  // saved last: a saved output keeps its tangent
    node->activation = activation;
    node->walked = walked;
    if (activation.saves == Saves::Mask) {
      node->saved = autograd::SavedVariable(mask, /*is_output=*/false);
    } else if (activation.saves == Saves::Output) {
      node->saved = autograd::SavedVariable(x, /*is_output=*/true, /*is_inplace_on_view=*/x.is_view());
    } else {
      node->saved = autograd::SavedVariable(original, /*is_output=*/false);
    }
  }
  if (is_forward_with_mask(op)) torch::jit::push(*stack, std::move(mask));
}

// The row and arguments an internal operator was called with (activation: str, args: float[], saved_as: str).
Activation internal_activation(const c10::IValue& name, const c10::IValue& args, const c10::IValue& saved_as) {
  const std::string& as = saved_as.toStringRef();
  const Saves saves = as == "mask" ? Saves::Mask : (as == "input" ? Saves::Input : Saves::Output);
  return Activation{&op_row(name.toStringRef()), functor_args(args.toDoubleVector()), saves};
}

// backward(grad_output, saved, activation, args, saved_as) -> grad_input
void backward_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const Tensor grad = torch::jit::peek(*stack, 0, 5).toTensor();
  const Tensor saved = torch::jit::peek(*stack, 1, 5).toTensor();
  const Activation activation =
      internal_activation(torch::jit::peek(*stack, 2, 5), torch::jit::peek(*stack, 3, 5), torch::jit::peek(*stack, 4, 5));
  const bool differentiable_saved = activation.saves != Saves::Mask;
  const bool grad_needs = needs_grad(grad), saved_needs = differentiable_saved && needs_grad(saved);
  const bool grad_tangent = has_tangent(grad), saved_tangent = differentiable_saved && has_tangent(saved);
  below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
  if (!grad_needs && !saved_needs && !grad_tangent && !saved_tangent) return;
  Tensor result = torch::jit::pop(*stack).toTensor();
  if (grad_needs || saved_needs) {
    auto node = new_node<BackwardBackward>(grad, differentiable_saved ? saved : Tensor());
    autograd::set_history(result, node);
    node->activation = activation;
    node->saved = autograd::SavedVariable(saved, /*is_output=*/false);
    if (saved_needs) node->grad_output = autograd::SavedVariable(grad, /*is_output=*/false);
    if (!differentiable_saved) node->walked = walked_strides(grad);  // the mask's order: grad_output's
  }
  if (grad_tangent || saved_tangent) {
    Tensor t;
    if (grad_tangent) {
      t = differentiable_saved ? activation.backward(tangent(grad), primal(saved))
                               : mask_backward(activation, tangent(grad), saved, walked_strides(grad));
    }
    if (saved_tangent) {
      Tensor u = activation.double_backward(tangent(saved), primal(grad), primal(saved));
      t = t.defined() ? at::add(t, u) : u;
    }
    result._set_fw_grad(t, /*level=*/0, /*is_inplace_op=*/false);
  }
  torch::jit::push(*stack, std::move(result));
}

// double_backward(grad_grad, grad_output, saved, activation, args, saved_as) -> grad_grad * grad_output * f''(saved)
void double_backward_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const Tensor grad_grad = torch::jit::peek(*stack, 0, 6).toTensor();
  const Tensor grad = torch::jit::peek(*stack, 1, 6).toTensor();
  const Tensor saved = torch::jit::peek(*stack, 2, 6).toTensor();
  const Activation activation =
      internal_activation(torch::jit::peek(*stack, 3, 6), torch::jit::peek(*stack, 4, 6), torch::jit::peek(*stack, 5, 6));
  const bool any_needs = needs_grad(grad_grad) || needs_grad(grad) || needs_grad(saved);
  if (has_tangent(saved)) third_derivative_not_supported(*activation.row);
  const bool gg_tangent = has_tangent(grad_grad), g_tangent = has_tangent(grad);
  below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
  if (!any_needs && !gg_tangent && !g_tangent) return;
  Tensor result = torch::jit::pop(*stack).toTensor();
  if (any_needs) {
    auto node = new_node<DoubleBackwardBackward>(grad_grad, grad, saved);
    autograd::set_history(result, node);
    node->activation = activation;
    node->grad_grad = autograd::SavedVariable(grad_grad, /*is_output=*/false);
    node->grad_output = autograd::SavedVariable(grad, /*is_output=*/false);
    node->saved = autograd::SavedVariable(saved, /*is_output=*/false);
  }
  if (gg_tangent || g_tangent) {
    Tensor t;
    if (gg_tangent) t = activation.double_backward(tangent(grad_grad), primal(grad), primal(saved));
    if (g_tangent) {
      Tensor u = activation.double_backward(primal(grad_grad), tangent(grad), primal(saved));
      t = t.defined() ? at::add(t, u) : u;
    }
    result._set_fw_grad(t, /*level=*/0, /*is_inplace_op=*/false);
  }
  torch::jit::push(*stack, std::move(result));
}

// backward_, which the nodes call only on a gradient that nothing else sees (can_take_result): not differentiable.
// Called on a tensor that needs a gradient, it says so rather than cut the graph.
void not_differentiable_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  for (const c10::IValue& value : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (!value.isTensor()) continue;
    TORCH_CHECK(!needs_grad(value.toTensor()) && !has_tangent(value.toTensor()), op.schema().name(),
                " is an internal operator of the activations autograd layer and is not differentiable; call the"
                " activation itself (activations.<name> or torch.ops.activations.<name>)");
  }
  below_autograd(keys, [&](auto below) { op.redispatchBoxed(below, stack); });
}

// The in-place operators on the ADInplaceOrView key, as torch's generated ADInplaceOrView kernels: the op below
// it, then the version bump. Our autograd kernels go below this key themselves and bump the version, so this runs
// only where they do not run: in inference mode, on a tensor that is not an inference tensor (autograd is off there,
// but a tensor saved for a backward before and overwritten there must still show it, or that backward gives wrong
// gradients without an error, as ours did), and on an inference tensor outside inference mode (which has no
// version: the bump raises torch's error, as torch's in-place ops do; like theirs, after the write).
void inplace_or_view_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
  const Tensor written = torch::jit::peek(*stack, 0, op.schema().arguments().size()).toTensor();
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  autograd::increment_version(written);
}

// ---------------------------------------------------------------------------------------------------------------
// vmap: the batching rule of every operator. An elementwise op under vmap is the same op on the tensor beneath,
// its batch dimension moved to the front (unbatched operands expanded to the batch size). A mask holds the bits
// of each sample from a byte boundary: samples whose element count is not a multiple of 8 are padded.

// Whether the operator reads or writes a mask (forward_with_mask, forward_with_mask_, backward(_) of a mask).
bool uses_mask(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments) {
  const std::string& name = op.schema().name();
  if (name == "activations::forward_with_mask" || name == "activations::forward_with_mask_") return true;
  return (name == "activations::backward" || name == "activations::backward_") && arguments[4].toStringRef() == "mask";
}

// The level of the vmap whose batching rule is running.
int64_t current_vmap_level() {
  const auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value(), "activations: a batching rule ran outside vmap");
  return layer->layerId();
}

// t, unwrapped at a vmap level (batched at bdim, or not batched), with the batch dimension in front: moved there
// (not where it is in front already: a view op's dispatch costs a few us), or expanded to the batch size.
Tensor batch_in_front(const Tensor& t, std::optional<int64_t> bdim, int64_t batch) {
  if (bdim) return *bdim == 0 ? t : t.movedim(*bdim, 0);
  std::vector<c10::SymInt> sizes{c10::SymInt(batch)};
  sizes.insert(sizes.end(), t.sym_sizes().begin(), t.sym_sizes().end());
  return t.unsqueeze(0).expand_symint(sizes);
}

void batched_kernel(const c10::OperatorHandle& op, Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  const int64_t level = current_vmap_level();
  const auto& schema = op.schema();
  const size_t num_arguments = schema.arguments().size();
  std::vector<c10::IValue> arguments = torch::jit::pop(*stack, num_arguments);
  const bool writes_first = schema.arguments()[0].alias_info() != nullptr && schema.arguments()[0].alias_info()->isWrite();
  const bool with_mask = uses_mask(op, arguments);
  const bool mask_is_input = with_mask && schema.name() != "activations::forward_with_mask" &&
                             schema.name() != "activations::forward_with_mask_";

  // Unwrap the tensors at this level; find the batch size.
  std::vector<std::pair<Tensor, std::optional<int64_t>>> tensors(num_arguments);
  std::optional<int64_t> batch_size;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (!arguments[i].isTensor()) continue;
    std::tie(tensors[i].first, tensors[i].second) = at::functorch::unwrapTensorAtLevel(arguments[i].toTensor(), level);
    if (tensors[i].second) batch_size = tensors[i].first.size(*tensors[i].second);
  }
  if (!batch_size) {  // nothing batched at this level
    for (auto& argument : arguments) torch::jit::push(*stack, std::move(argument));
    return op.callBoxed(stack);
  }
  const int64_t batch = *batch_size;
  TORCH_CHECK(!writes_first || tensors[0].second.has_value(), "vmap: ", schema.name(),
              " writes its first argument in place, which is not batched while another argument is; clone it into a"
              " batched tensor first (torch's in-place operations refuse the same)");
  // Every sample's data: the batch dimension in front, in memory order (a mask's bits follow that order).
  const size_t mask_position = 1;  // backward(grad_output, mask, ...)
  int64_t sample_numel = 1;
  std::vector<int64_t> sample_shape;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (!arguments[i].isTensor()) continue;
    auto& [value, bdim] = tensors[i];
    value = batch_in_front(value, bdim, batch);
    if (!(mask_is_input && i == mask_position) && sample_shape.empty()) {
      sample_shape.assign(value.sizes().begin() + 1, value.sizes().end());
      sample_numel = c10::multiply_integers(sample_shape);
    }
  }
  if (!with_mask) {
    for (size_t i = 0; i < num_arguments; ++i) {
      if (arguments[i].isTensor()) arguments[i] = tensors[i].first;
    }
  }
  // With a mask: each sample's data contiguous and padded to a multiple of 8 elements, the mask [batch, bytes].
  const int64_t padded = (sample_numel + 7) / 8 * 8;
  const bool pad = with_mask && padded != sample_numel;
  Tensor written;  // where an in-place op's result must end up (the moved view of its first argument)
  if (with_mask) {
    for (size_t i = 0; i < num_arguments; ++i) {
      if (!arguments[i].isTensor()) continue;
      Tensor value = tensors[i].first;
      if (mask_is_input && i == mask_position) {
        arguments[i] = value.contiguous().view({-1});
        continue;
      }
      if (writes_first && i == 0) written = value;
      Tensor flat = value.reshape({batch, sample_numel});
      arguments[i] = pad ? at::constant_pad_nd(flat, {0, padded - sample_numel}) : flat.contiguous();
    }
  }
  const std::vector<c10::IValue> inputs = arguments;
  for (auto& argument : arguments) torch::jit::push(*stack, std::move(argument));
  op.callBoxed(stack);

  // Outputs back to the samples' shapes, batched at dimension 0.
  const auto data_back = [&](const Tensor& t) {
    if (!with_mask) return t;
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    return (pad ? t.narrow(1, 0, sample_numel) : t).reshape(shape);
  };
  // An in-place op that ran on a padded or contiguous copy: its result back into the argument.
  if (written.defined() && !written.is_alias_of(inputs[0].toTensor())) written.copy_(data_back(inputs[0].toTensor()));
  const size_t num_returns = schema.returns().size();
  std::vector<c10::IValue> returns = torch::jit::pop(*stack, num_returns);
  for (size_t r = 0; r < num_returns; ++r) {
    Tensor out = returns[r].toTensor();
    const bool is_mask = with_mask && !mask_is_input && (num_returns == 1 || r == 1);
    out = is_mask ? out.view({batch, -1}) : data_back(out);
    torch::jit::push(*stack, at::functorch::makeBatched(out, 0, level));
  }
}

}  // namespace
}  // namespace activations

using namespace activations;

TORCH_LIBRARY_IMPL(activations, Autograd, m) {
  using torch::CppFunction;
  for (const OpRow& row : kOpRows) {
    m.impl(row.name, CppFunction::makeFromBoxedFunction<&forward_autograd>());
    if (row.inplace) {
      m.impl((std::string(row.name) + "_").c_str(), CppFunction::makeFromBoxedFunction<&forward_inplace_autograd>());
    }
  }
  m.impl("backward", CppFunction::makeFromBoxedFunction<&backward_autograd>());
  m.impl("double_backward", CppFunction::makeFromBoxedFunction<&double_backward_autograd>());
  m.impl("forward_with_mask", CppFunction::makeFromBoxedFunction<&forward_autograd>());
  m.impl("forward_with_mask_", CppFunction::makeFromBoxedFunction<&forward_inplace_autograd>());
  m.impl("backward_", CppFunction::makeFromBoxedFunction<&not_differentiable_autograd>());
}

TORCH_LIBRARY_IMPL(activations, ADInplaceOrView, m) {
  using torch::CppFunction;
  for (const OpRow& row : kOpRows) {
    if (row.inplace) {
      m.impl((std::string(row.name) + "_").c_str(), CppFunction::makeFromBoxedFunction<&inplace_or_view_kernel>());
    }
  }
  m.impl("forward_with_mask_", CppFunction::makeFromBoxedFunction<&inplace_or_view_kernel>());
  m.impl("backward_", CppFunction::makeFromBoxedFunction<&inplace_or_view_kernel>());
}

TORCH_LIBRARY_IMPL(activations, FuncTorchBatched, m) {
  using torch::CppFunction;
  for (const OpRow& row : kOpRows) {
    m.impl(row.name, CppFunction::makeFromBoxedFunction<&batched_kernel>());
    if (row.inplace) m.impl((std::string(row.name) + "_").c_str(), CppFunction::makeFromBoxedFunction<&batched_kernel>());
  }
  for (const char* name : {"forward_with_mask", "forward_with_mask_", "backward", "backward_", "double_backward"}) {
    m.impl(name, CppFunction::makeFromBoxedFunction<&batched_kernel>());
  }
}

// Softmax and log_softmax, in this unit so that torch's headers are parsed once (see softmax_autograd.cpp).
#include "softmax_autograd.cpp"
