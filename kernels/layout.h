// Layout helpers that the operators (activations.cpp) and the autograd layer (autograd.cpp) both need.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>

#include <utility>
#include <vector>

namespace activations {

// Whether t's strides are these on every dimension of more than one element (the stride of a dimension of size 1
// moves no element: two dense tensors that differ only there hold their elements in the same order).
inline bool has_strides(const at::Tensor& t, c10::SymIntArrayRef strides) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sym_size(d) != 1 && t.sym_stride(d) != strides[d]) return false;
  }
  return true;
}

// `t` laid out densely with these strides (or ones that differ only on dimensions of size 1), copying only if it is
// not already.
inline at::Tensor with_strides(const at::Tensor& t, c10::SymIntArrayRef strides) {
  if (t.is_non_overlapping_and_dense() && has_strides(t, strides)) return t;
  return at::empty_strided_symint(t.sym_sizes(), strides, t.options()).copy_(t);
}

// What elu_backward_ needs of its operands, which the out-of-place elu_backward arranges by copying.
inline bool same_dense_layout(const at::Tensor& grad, const at::Tensor& saved) {
  return saved.is_non_overlapping_and_dense() && grad.is_non_overlapping_and_dense() &&
         has_strides(grad, saved.sym_strides());
}

// The dimensions of t from the outermost in memory to the innermost, as torch orders them to lay out an elementwise
// op's result (TensorIterator's reorder_dimensions, empty_like's infer_dense_strides): the larger stride outer; of
// equal strides, the larger size outer; a dimension of stride 0 (expanded) keeps its place. For a contiguous tensor,
// 0, 1, ..., dim - 1; for a channels_last one, N, H, W, C. Sizes may be symbolic (the comparisons then guard).
inline std::vector<int64_t> memory_order(const at::Tensor& t) {
  const int64_t dims = t.dim();
  // TensorIterator's insertion sort, innermost first from a contiguous tensor's order: each dimension moves inward
  // past every one that must lie outside it, stops at one that must lie inside it, and looks past one that may lie
  // on either side.
  std::vector<int64_t> inner_first(dims);
  for (int64_t i = 0; i < dims; ++i) inner_first[i] = dims - 1 - i;
  auto outer_than = [&](int64_t a, int64_t b) {  // +1: a lies outside b; -1: inside; 0: either
    const c10::SymInt& stride_a = t.sym_stride(a);
    const c10::SymInt& stride_b = t.sym_stride(b);
    if (stride_a == 0 || stride_b == 0) return 0;
    if (stride_a != stride_b) return stride_a > stride_b ? 1 : -1;
    return t.sym_size(a) > t.sym_size(b) ? 1 : 0;
  };
  for (int64_t i = 1; i < dims; ++i) {
    for (int64_t inner = i - 1, moving = i; inner >= 0; --inner) {
      const int comparison = outer_than(inner_first[inner], inner_first[moving]);
      if (comparison < 0) break;
      if (comparison > 0) {
        std::swap(inner_first[inner], inner_first[moving]);
        moving = inner;
      }
    }
  }
  return {inner_first.rbegin(), inner_first.rend()};
}

// The strides of a dense tensor of t's sizes whose dimensions lie in `order`, outermost first (0, 1, ..., dim - 1:
// contiguous).
inline std::vector<c10::SymInt> dense_strides(const at::Tensor& t, const std::vector<int64_t>& order) {
  std::vector<c10::SymInt> strides(t.dim(), c10::SymInt(1));
  c10::SymInt stride = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    strides[*d] = stride;
    stride = stride * t.sym_size(*d).max(1);
  }
  return strides;
}

}  // namespace activations
