// Layout helpers that the operators (activations.cpp) and the autograd layer (autograd.cpp) both need.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>

namespace activations {

// `t` laid out densely with exactly these strides, copying only if it is not already.
inline at::Tensor with_strides(const at::Tensor& t, c10::SymIntArrayRef strides) {
  if (t.sym_strides() == strides && t.is_non_overlapping_and_dense()) return t;
  return at::empty_strided_symint(t.sym_sizes(), strides, t.options()).copy_(t);
}

// What elu_backward_ needs of its operands, which the out-of-place elu_backward arranges by copying.
inline bool same_dense_layout(const at::Tensor& grad, const at::Tensor& saved) {
  return saved.is_non_overlapping_and_dense() && grad.sym_strides() == saved.sym_strides();
}

}  // namespace activations
