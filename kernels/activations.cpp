// torch glue: the operators' schemas (from the op table, op_table.h), their checks and their CPU, CUDA and Meta
// kernels, registered in C++. The math lives in activations.cuh, the kernels in cpu_kernels.cpp and
// cuda_kernels.cu behind kernels.h, the autograd layer and the batching rules in autograd.cpp (included at the end
// of this unit).
//
// Every operator has one boxed kernel for all activations: it reads its row of the op table by the operator's
// name. Public operators, one pair per row:
//   NAME(Tensor input, <torch's parameters>) -> Tensor   NAME_(Tensor(a!) input, <parameters>) -> ()   (in place)
// Internal ones, shared by all rows (`args`: the functor's arguments, as functor_args makes them; `saved_as`:
// "mask", "input" or "output"):
//   forward_with_mask(x, activation, args) -> (y, mask)      forward_with_mask_(x!, activation, args) -> mask
//   backward(grad_output, saved, activation, args, saved_as) -> grad_input       (backward_: into grad_output)
//   double_backward(grad_grad, grad_output, saved, activation, args, saved_as) -> the gradient for `saved`
//
// Compiled by activations.py with ACTIVATIONS_WITH_CUDA defined when the CUDA part is built.

// torch's headers include ATen/Functions.h (every operator's declaration, about 3 s of a cold build) unless
// AT_PER_OPERATOR_HEADERS says the per-operator headers in ATen/ops/ are included where they are needed, as we do.
#ifndef AT_PER_OPERATOR_HEADERS
#define AT_PER_OPERATOR_HEADERS
#endif
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/DeviceGuard.h>
#ifdef ACTIVATIONS_WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"
#include "layout.h"
#include "op_args.h"

namespace activations {
namespace {

using at::Tensor;
using torch::jit::Stack;

// ---------------------------------------------------------------------------------------------------------------
// Checks and layout

// `advice`: what else the caller can do about an unsupported dtype (softmax's dtype= argument).
void check_input(const Tensor& t, const char* op, const char* what, const char* advice = "") {
  const auto dtype = t.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
                   "activations.", op, ": unsupported dtype torch.", c10::getDtypeNames(dtype).first, " for ", what,
                   "; supported: float32, float64, float16, bfloat16", advice);
  TORCH_CHECK(t.layout() == at::kStrided, "activations.", op, ": ", what, " must be a dense (strided) tensor, got ",
              t.layout());
}

void check_same(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  TORCH_CHECK(a.device() == b.device(), "activations.", op, ": ", a_name, " is on ", a.device(), " but ", b_name,
              " is on ", b.device());
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "activations.", op, ": ", a_name, " has dtype ",
                   a.scalar_type(), " but ", b_name, " has dtype ", b.scalar_type());
  TORCH_CHECK(a.sym_sizes() == b.sym_sizes(), "activations.", op, ": ", a_name, " has shape ", a.sym_sizes(), " but ",
              b_name, " has shape ", b.sym_sizes());
}

// The kernels walk memory linearly. A tensor that covers one dense block (contiguous, transposed,
// channels_last, ...) is used as it is and its output gets the same strides, as torch does; anything else
// (step slices, expanded dimensions) is first viewed in its memory order (MemoryOrder) and then copied to a
// contiguous tensor, but rows (rows_of).
Tensor dense(const Tensor& t) { return t.is_non_overlapping_and_dense() ? t : t.contiguous(); }

// A tensor neither dense nor row-major (a channel slice of a channels_last tensor, a slice of a transposed one) is
// handed to the kernels with its dimensions permuted into memory order (memory_order in layout.h), where it is
// row-major: its rows are walked in place or it is copied contiguously in that order, and the result, permuted
// back, is laid out as torch's own result for that input. A mask's bits follow the same order (walked_strides in
// autograd.cpp). For a dense or row-major tensor, nothing is permuted.
struct MemoryOrder {
  std::vector<int64_t> order, inverse;  // empty: nothing to permute

  explicit MemoryOrder(const Tensor& t) {
    if (t.is_non_overlapping_and_dense()) return;
    std::vector<int64_t> found = memory_order(t);
    if (std::is_sorted(found.begin(), found.end())) return;
    inverse.resize(found.size());
    for (size_t i = 0; i < found.size(); ++i) inverse[found[i]] = static_cast<int64_t>(i);
    order = std::move(found);
  }
  Tensor into(const Tensor& t) const { return order.empty() ? t : t.permute(order); }
  Tensor back(const Tensor& t) const { return order.empty() ? t : t.permute(inverse); }
};

// Rows shorter than this are copied to a contiguous tensor rather than walked row by row: on the CPU each row
// costs a call of the loop. The forwards of ReLU and SiLU over halves of rows (x.chunk(2, -1), 2^21 elements, 2
// threads, 2-core Zen 4; results/cpu-epyc-2026-12-07/rows_length.log): float32 rows of 32 and 64 took 0.22-0.23 and
// 0.16 ms walked against 0.33-0.40 copied (ReLU); rows of 16 walked cost the bfloat16 forwards 12-26 %. With short
// rows prefetched (cpu_kernels.cpp), walking rows of 8-24 still lost in bfloat16 and in the steps with a mask
// (rows_shorter_than_32.log).
constexpr int64_t kMinRowLength = 32;

// A tensor that is not one dense block but whose elements lie in rows (Rows in kernels.h) of at least
// kMinRowLength elements: the kernels walk it where it lies in place of a contiguous copy (a pass over memory
// less), and the op's output is contiguous, as dense()'s copy gave it (in the order MemoryOrder hands t over). On
// the CPU, with a mask, rows of whole mask bytes (a multiple of 8 elements); on CUDA, out of place only (the
// caller's part) and fewer than 2^31 elements (RowIndex's 32-bit division, cuda_kernels.cuh).
std::optional<Rows> rows_of(const Tensor& t, bool with_mask) {
  if (!(t.is_cpu() || t.is_cuda()) || t.is_non_overlapping_and_dense()) return std::nullopt;
  // The dense row: the innermost dimensions that continue one another (size 1 continues anything).
  int64_t length = 1;
  int64_t d = t.dim() - 1;
  for (; d >= 0 && (t.size(d) == 1 || t.stride(d) == length); --d) length *= t.size(d);
  if (d < 0 || t.stride(d) <= length) return std::nullopt;  // overlapping or interleaved rows
  // The dimensions outside it: one sequence of rows at t.stride(d) apart.
  const int64_t stride = t.stride(d);
  for (int64_t next = stride * t.size(d), e = d - 1; e >= 0; --e) {
    if (t.size(e) == 1) continue;
    if (t.stride(e) != next) return std::nullopt;
    next *= t.size(e);
  }
  if (length < kMinRowLength) return std::nullopt;
  if (t.is_cpu() && with_mask && length % 8 != 0) return std::nullopt;
  if (t.is_cuda() && t.numel() >= (int64_t(1) << 31)) return std::nullopt;
  return Rows{length, stride};
}

// A kernel's result: a new tensor of t's sizes, dtype and device, laid out as t (dense) is, or contiguous. CPU and
// CUDA memory comes from the device's allocator directly, as torch's own structured kernels take theirs: through
// the dispatcher (at::empty_like) a call of 1024 float32 elements on the CPU spent about 0.3 us of its 1.65 there.
// Meta tensors, whose sizes may be symbolic under torch.compile, keep the dispatcher's route.
Tensor new_output(const Tensor& t, bool contiguous = false) {
  if (t.is_cpu()) {
    return contiguous ? at::detail::empty_cpu(t.sizes(), t.scalar_type())
                      : at::detail::empty_strided_cpu(t.sizes(), t.strides(), t.scalar_type());
  }
#ifdef ACTIVATIONS_WITH_CUDA
  if (t.is_cuda()) {
    return contiguous ? at::detail::empty_cuda(t.sizes(), t.scalar_type(), t.device(), std::nullopt)
                      : at::detail::empty_strided_cuda(t.sizes(), t.strides(), t.scalar_type(), t.device());
  }
#endif
  return contiguous ? at::empty_like(t, at::MemoryFormat::Contiguous) : at::empty_like(t);
}

// The backward's bits, 8 to a byte (sizes may be symbolic under torch.compile), from the allocator as new_output.
Tensor new_mask(const Tensor& x) {
  if (x.is_cpu()) return at::detail::empty_cpu({(x.numel() + 7) / 8}, at::kByte);
#ifdef ACTIVATIONS_WITH_CUDA
  if (x.is_cuda()) return at::detail::empty_cuda({(x.numel() + 7) / 8}, at::kByte, x.device(), std::nullopt);
#endif
  return at::empty_symint({(x.sym_numel() + 7) / 8}, x.options().dtype(at::kByte));
}

// In place: a tensor whose elements share memory (expanded) cannot be written, as in torch.
void check_writable(const Tensor& x, const char* op) {
  TORCH_CHECK(x.is_non_overlapping_and_dense() || at::has_internal_overlap(x) != at::MemOverlap::Yes,
              "activations.", op, ": unsupported operation: more than one element of the written-to tensor refers",
              " to a single memory location. Please clone() the tensor before performing the operation.");
}

Saves saves_from(std::string_view saved_as) {
  if (saved_as == "mask") return Saves::Mask;
  if (saved_as == "input") return Saves::Input;
  TORCH_CHECK(saved_as == "output", "activations: saved_as must be 'mask', 'input' or 'output', got '",
              std::string(saved_as), "'");
  return Saves::Output;
}

// ---------------------------------------------------------------------------------------------------------------
// Running the kernels. kCompute is false for the Meta kernels: shapes and strides only, for torch.compile's fake
// tensors and the meta device (which have no data).

DType dtype_of(const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kHalf: return DType::Float16;
    default: return DType::BFloat16;
  }
}

// Runs `launch(stream)` on t's device and current stream and turns a launch error into an exception. The
// launch lambdas are generic (`auto stream`), so a build without CUDA never instantiates their calls into
// cuda_kernels.cu; there CUDA tensors never get here (no CUDA kernels are registered).
template <class Launch>
void on_cuda(const Tensor& t, const char* op, Launch&& launch) {
#ifdef ACTIVATIONS_WITH_CUDA
  const c10::DeviceGuard guard(t.device());
  // c10::Stream::native_handle() gave a stream that broke CUDA graph capture with torch 2.11; this is the
  // documented way to the current stream.
  void* stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
  const char* error = launch(stream);
  TORCH_CHECK(error == nullptr, "activations.", op, ": CUDA kernel launch failed: ", error);
#else
  TORCH_CHECK(false, "activations.", op, ": this build has no CUDA kernels");
#endif
}

// y = f(x) (x and y dense with the same strides, or the same tensor; x may lie in rows, and on the CPU so may y
// where it is x), with the mask when it is defined.
void forward_into(const OpRow& row, const FunctorArgs& args, const Tensor& x, const Tensor& y, const Tensor& mask,
                  Rows x_rows = {}, Rows y_rows = {}) {
  const int64_t n = x.numel();
  if (n == 0) return;
  uint8_t* mask_ptr = mask.defined() ? mask.mutable_data_ptr<uint8_t>() : nullptr;
  if (x.is_cuda()) {
    return on_cuda(x, row.name, [&](auto stream) {
      return cuda_forward(row.functor, dtype_of(x), args.data(), x.const_data_ptr(), y.mutable_data_ptr(), mask_ptr,
                          n, stream, x_rows);
    });
  }
  cpu_forward(row.functor, dtype_of(x), args.data(), x.const_data_ptr(), y.mutable_data_ptr(), mask_ptr, n, x_rows,
              y_rows);
}

// Out of place: the output has the input's strides when the input is dense (see dense()), else those of a dense
// tensor in the input's memory order (MemoryOrder).
template <bool kCompute>
std::pair<Tensor, Tensor> forward_out_of_place(const OpRow& row, const FunctorArgs& args, const Tensor& input,
                                               bool with_mask) {
  check_input(input, row.name, "input");
  const MemoryOrder order(input);
  const Tensor ordered = order.into(input);
  const std::optional<Rows> rows = rows_of(ordered, with_mask);
  const Tensor x = rows ? ordered : dense(ordered);
  Tensor y = new_output(x, rows.has_value());
  Tensor mask = with_mask ? new_mask(x) : Tensor();
  if constexpr (kCompute) forward_into(row, args, x, y, mask, rows.value_or(Rows{}));
  return {order.back(y), mask};
}

// In place; a tensor that is not a dense block is walked, in its memory order (MemoryOrder), by rows (rows_of; on
// the CPU) or computed densely and copied back. The mask follows that order (the autograd layer lays the gradient
// out in it: walked_strides).
template <bool kCompute>
Tensor forward_in_place(const OpRow& row, const FunctorArgs& args, const Tensor& input, bool with_mask,
                        const char* op) {
  check_input(input, op, "input");
  check_writable(input, op);
  Tensor mask = with_mask ? new_mask(input) : Tensor();
  if constexpr (kCompute) {
    const Tensor x = MemoryOrder(input).into(input);  // a view: writing it writes input
    if (x.is_non_overlapping_and_dense()) {
      forward_into(row, args, x, x, mask);
    } else if (const std::optional<Rows> rows = x.is_cpu() ? rows_of(x, with_mask) : std::nullopt) {
      forward_into(row, args, x, x, mask, *rows, *rows);
    } else {
      const Tensor source = x.contiguous();
      forward_into(row, args, source, source, mask);
      x.copy_(source);
    }
  }
  return mask;
}

// Whether the derivative can be read off `saved_as`, with these arguments (ELU from its output: alpha >= 0).
void check_backward_from(const OpRow& row, const FunctorArgs& args, Saves saves, const char* op) {
  with_functor(row.functor, [&](auto tag) {
    using F = typename decltype(tag)::template type<double>;
    if (saves == Saves::Mask) {
      TORCH_CHECK(F::kMask, "activations.", op, ": ", row.name, " has no mask backward");
    } else if (saves == Saves::Input) {
      TORCH_CHECK(F::kFromInput, "activations.", op, ": ", row.name, " has no backward from its input");
    } else {
      TORCH_CHECK(F::kFromOutput, "activations.", op, ": ", row.name, " has no backward from its output");
      if constexpr (F::kFromOutput) {
        TORCH_CHECK(F::output_determines_input_side(args.data()), "activations.", op, ": the in-place ", row.name,
                    "_ cannot be differentiated with these arguments (alpha = ", std::to_string(args.values[0]),
                    " < 0): its output does not tell the sign of its input. Use the out-of-place ", row.name,
                    " instead.");
      }
    }
  });
}

// The mask backward's factors: grad * passing where the bit is set, grad * blocked where not.
std::pair<double, double> mask_factors(const OpRow& row, const FunctorArgs& args) {
  return with_functor(row.functor, [&](auto tag) {
    using F = typename decltype(tag)::template type<double>;
    if constexpr (F::kMask) {
      const F f(args.data());
      return std::make_pair(f.passing, f.blocked);
    }
    return std::make_pair(1.0, 0.0);  // not reached: check_backward_from refused it
  });
}

void check_mask(const Tensor& grad_output, const Tensor& mask, const char* op) {
  TORCH_CHECK(grad_output.is_non_overlapping_and_dense(), "activations.", op,
              ": grad_output must be dense in the forward output's layout");
  const c10::SymInt bytes = (grad_output.sym_numel() + 7) / 8;
  TORCH_CHECK(mask.scalar_type() == at::kByte && mask.dim() == 1 && mask.is_contiguous() && mask.sym_numel() == bytes,
              "activations.", op, ": the saved mask must be the uint8 tensor of ", bytes,
              " bytes that forward_with_mask returned, got ", mask.scalar_type(), " of shape ", mask.sizes());
  TORCH_CHECK(mask.device() == grad_output.device(), "activations.", op, ": grad_output is on ", grad_output.device(),
              " but the saved mask is on ", mask.device());
}

// grad_input = grad_output * f'(saved); grad_input may be grad_output itself. grad_output and saved are dense
// with the same strides (or saved is the mask of grad_output's memory order, or lies in saved_rows and grad_output
// is contiguous).
void backward_into(const OpRow& row, const FunctorArgs& args, Saves saves, const Tensor& grad_output,
                   const Tensor& saved, const Tensor& grad_input, const char* op, Rows saved_rows = {}) {
  const int64_t n = grad_output.numel();
  if (n == 0) return;
  const DType dtype = dtype_of(grad_output);
  if (saves == Saves::Mask) {
    const auto [passing, blocked] = mask_factors(row, args);
    const auto* mask = saved.const_data_ptr<uint8_t>();
    if (grad_output.is_cuda()) {
      return on_cuda(grad_output, op, [&](auto stream) {
        return cuda_mask_backward(dtype, passing, blocked, grad_output.const_data_ptr(), mask,
                                  grad_input.mutable_data_ptr(), n, stream);
      });
    }
    return cpu_mask_backward(dtype, passing, blocked, grad_output.const_data_ptr(), mask, grad_input.mutable_data_ptr(),
                             n);
  }
  const bool from_output = saves == Saves::Output;
  if (grad_output.is_cuda()) {
    return on_cuda(grad_output, op, [&](auto stream) {
      return cuda_backward(row.functor, dtype, args.data(), from_output, grad_output.const_data_ptr(),
                           saved.const_data_ptr(), grad_input.mutable_data_ptr(), n, stream, saved_rows);
    });
  }
  cpu_backward(row.functor, dtype, args.data(), from_output, grad_output.const_data_ptr(), saved.const_data_ptr(),
               grad_input.mutable_data_ptr(), n, saved_rows);
}

// ---------------------------------------------------------------------------------------------------------------
// The boxed kernels. Each reads its arguments off the stack and leaves its results there.

// The row and functor arguments of an internal operator: activation (str) and args (float[]) at these positions.
std::pair<const OpRow*, FunctorArgs> internal_row(const c10::IValue& activation, const c10::IValue& args) {
  return {&op_row(activation.toStringRef()), functor_args(args.toDoubleVector())};
}

// NAME(x, params) -> y
template <bool kCompute>
void forward_kernel(const c10::OperatorHandle& op, Stack* stack) {
  const OpRow& row = op_row(op.schema().name());
  const auto arguments = torch::jit::last(*stack, op.schema().arguments().size());
  const FunctorArgs args = functor_args(row, &arguments[1]);
  Tensor y = forward_out_of_place<kCompute>(row, args, arguments[0].toTensor(), false).first;
  torch::jit::drop(*stack, arguments.size());
  torch::jit::push(*stack, std::move(y));
}

// NAME_(x!, params) -> ()
template <bool kCompute>
void forward_inplace_kernel(const c10::OperatorHandle& op, Stack* stack) {
  const OpRow& row = op_row(op.schema().name());
  const auto arguments = torch::jit::last(*stack, op.schema().arguments().size());
  const FunctorArgs args = functor_args(row, &arguments[1]);
  forward_in_place<kCompute>(row, args, arguments[0].toTensor(), false, op.schema().name().c_str() + 13);
  torch::jit::drop(*stack, arguments.size());
}

// forward_with_mask(x, activation, args) -> (y, mask)
template <bool kCompute>
void forward_with_mask_kernel(const c10::OperatorHandle&, Stack* stack) {
  const auto [row, args] = internal_row(torch::jit::peek(*stack, 1, 3), torch::jit::peek(*stack, 2, 3));
  check_backward_from(*row, args, Saves::Mask, "forward_with_mask");
  auto [y, mask] = forward_out_of_place<kCompute>(*row, args, torch::jit::peek(*stack, 0, 3).toTensor(), true);
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(y), std::move(mask));
}

// forward_with_mask_(x!, activation, args) -> mask
template <bool kCompute>
void forward_with_mask_inplace_kernel(const c10::OperatorHandle&, Stack* stack) {
  const auto [row, args] = internal_row(torch::jit::peek(*stack, 1, 3), torch::jit::peek(*stack, 2, 3));
  check_backward_from(*row, args, Saves::Mask, "forward_with_mask_");
  Tensor mask = forward_in_place<kCompute>(*row, args, torch::jit::peek(*stack, 0, 3).toTensor(), true,
                                           "forward_with_mask_");
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(mask));
}

// The operands of backward and backward_: grad_output, the saved mask, input or output, the saved tensor's
// rows where the kernels walk it so (rows_of), and the memory order both are permuted into (MemoryOrder; the
// result is permuted back).
struct BackwardOperands {
  Tensor grad, saved;
  Rows saved_rows;
  MemoryOrder order;
};

// The checks of backward and backward_ and the layout both kernels need: for a saved input or output, a dense
// `saved` and grad_output laid out with its strides, or a saved tensor in rows and a contiguous grad_output.
BackwardOperands backward_operands(const OpRow& row, const FunctorArgs& args, Saves saves, const Tensor& grad_output,
                                   const Tensor& saved, const char* op) {
  check_input(grad_output, op, "grad_output");
  check_backward_from(row, args, saves, op);
  if (saves == Saves::Mask) {
    check_mask(grad_output, saved, op);
    return {grad_output, saved, Rows{}, MemoryOrder(grad_output)};  // dense: nothing permuted
  }
  check_same(grad_output, saved, op, "grad_output", "the saved tensor");
  MemoryOrder order(saved);
  const Tensor grad = order.into(grad_output);
  const Tensor ordered = order.into(saved);
  if (const std::optional<Rows> rows = rows_of(ordered, false)) {
    return {grad.contiguous(), ordered, *rows, std::move(order)};
  }
  const Tensor s = dense(ordered);
  return {with_strides(grad, s.sym_strides()), s, Rows{}, std::move(order)};
}

// backward(grad_output, saved, activation, args, saved_as) -> grad_input
template <bool kCompute>
void backward_kernel(const c10::OperatorHandle&, Stack* stack) {
  const auto [row, args] = internal_row(torch::jit::peek(*stack, 2, 5), torch::jit::peek(*stack, 3, 5));
  const Saves saves = saves_from(torch::jit::peek(*stack, 4, 5).toStringRef());
  const auto [grad, saved, saved_rows, order] = backward_operands(
      *row, args, saves, torch::jit::peek(*stack, 0, 5).toTensor(), torch::jit::peek(*stack, 1, 5).toTensor(),
      "backward");
  Tensor grad_input = new_output(grad);
  if constexpr (kCompute) backward_into(*row, args, saves, grad, saved, grad_input, "backward", saved_rows);
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, order.back(grad_input));
}

// backward_(grad_output!, saved, activation, args, saved_as) -> (), for a gradient that autograd hands over and
// nothing else refers to (see can_take_result in autograd.cpp).
template <bool kCompute>
void backward_inplace_kernel(const c10::OperatorHandle&, Stack* stack) {
  const auto [row, args] = internal_row(torch::jit::peek(*stack, 2, 5), torch::jit::peek(*stack, 3, 5));
  const Saves saves = saves_from(torch::jit::peek(*stack, 4, 5).toStringRef());
  const Tensor grad = torch::jit::peek(*stack, 0, 5).toTensor();
  const Tensor saved = torch::jit::peek(*stack, 1, 5).toTensor();
  backward_operands(*row, args, saves, grad, saved, "backward_");
  TORCH_CHECK(saves == Saves::Mask || same_dense_layout(grad, saved),
              "activations.backward_: grad_output and the saved tensor must be dense with the same strides");
  if constexpr (kCompute) backward_into(*row, args, saves, grad, saved, grad, "backward_");
  torch::jit::drop(*stack, 5);
}

// double_backward(grad_grad, grad_output, saved, activation, args, saved_as) -> grad_grad * grad_output * f''(saved)
template <bool kCompute>
void double_backward_kernel(const c10::OperatorHandle&, Stack* stack) {
  const auto [row, args] = internal_row(torch::jit::peek(*stack, 3, 6), torch::jit::peek(*stack, 4, 6));
  const Saves saves = saves_from(torch::jit::peek(*stack, 5, 6).toStringRef());
  const Tensor grad_grad = torch::jit::peek(*stack, 0, 6).toTensor();
  const Tensor grad_output = torch::jit::peek(*stack, 1, 6).toTensor();
  const Tensor saved = torch::jit::peek(*stack, 2, 6).toTensor();
  TORCH_CHECK(saves != Saves::Mask, "activations.double_backward: a mask has no derivative (the activation is"
              " piecewise linear: its second derivative is zero)");
  check_input(grad_grad, "double_backward", "grad_grad");
  check_backward_from(*row, args, saves, "double_backward");
  check_same(grad_grad, saved, "double_backward", "grad_grad", "the saved tensor");
  check_same(grad_output, saved, "double_backward", "grad_output", "the saved tensor");
  const MemoryOrder order(saved);
  const Tensor s = dense(order.into(saved));
  const Tensor gg = with_strides(order.into(grad_grad), s.sym_strides());
  const Tensor g = with_strides(order.into(grad_output), s.sym_strides());
  Tensor out = new_output(s);
  if constexpr (kCompute) {
    const int64_t n = s.numel();
    const bool from_output = saves == Saves::Output;
    if (n == 0) {
    } else if (s.is_cuda()) {
      on_cuda(s, "double_backward", [&](auto stream) {
        return cuda_double_backward(row->functor, dtype_of(s), args.data(), from_output, gg.const_data_ptr(),
                                    g.const_data_ptr(), s.const_data_ptr(), out.mutable_data_ptr(), n, stream);
      });
    } else {
      cpu_double_backward(row->functor, dtype_of(s), args.data(), from_output, gg.const_data_ptr(), g.const_data_ptr(),
                          s.const_data_ptr(), out.mutable_data_ptr(), n);
    }
  }
  torch::jit::drop(*stack, 6);
  torch::jit::push(*stack, order.back(out));
}

// Checks, once at load, that every row's functor can do what the row says its backward saves.
bool rows_match_functors() {
  for (const OpRow& row : kOpRows) {
    with_functor(row.functor, [&](auto tag) {
      using F = typename decltype(tag)::template type<double>;
      const bool ok = row.saves == Saves::Mask ? F::kMask : (row.saves == Saves::Input ? F::kFromInput : F::kFromOutput);
      TORCH_CHECK(ok, "activations: the op table says ", row.name, " saves what its functor cannot work from");
    });
  }
  return true;
}

}  // namespace
}  // namespace activations

// ---------------------------------------------------------------------------------------------------------------
// Registration

using namespace activations;

TORCH_LIBRARY(activations, m) {
  static const bool checked = rows_match_functors();
  (void)checked;
  for (const OpRow& row : kOpRows) {
    m.def((std::string(row.name) + row.arguments + " -> Tensor").c_str());
    if (row.inplace) {
      std::string arguments(row.arguments);
      const std::string tensor = "(Tensor ";
      arguments.replace(0, tensor.size(), "(Tensor(a!) ");  // the input is written
      m.def((std::string(row.name) + "_" + arguments + " -> ()").c_str());
    }
  }
  // Internal: what the autograd layer calls (see the top of this file).
  m.def("forward_with_mask(Tensor x, str activation, float[] args) -> (Tensor, Tensor)");
  m.def("forward_with_mask_(Tensor(a!) x, str activation, float[] args) -> Tensor");
  m.def("backward(Tensor grad_output, Tensor saved, str activation, float[] args, str saved_as) -> Tensor");
  m.def("backward_(Tensor(a!) grad_output, Tensor saved, str activation, float[] args, str saved_as) -> ()");
  m.def("double_backward(Tensor grad_grad, Tensor grad_output, Tensor saved, str activation, float[] args, "
        "str saved_as) -> Tensor");
}

namespace activations {
namespace {

template <bool kCompute>
void register_kernels(torch::Library& m) {
  using torch::CppFunction;
  for (const OpRow& row : kOpRows) {
    m.impl(row.name, CppFunction::makeFromBoxedFunction<&forward_kernel<kCompute>>());
    if (row.inplace) {
      m.impl((std::string(row.name) + "_").c_str(),
             CppFunction::makeFromBoxedFunction<&forward_inplace_kernel<kCompute>>());
    }
  }
  m.impl("forward_with_mask", CppFunction::makeFromBoxedFunction<&forward_with_mask_kernel<kCompute>>());
  m.impl("forward_with_mask_", CppFunction::makeFromBoxedFunction<&forward_with_mask_inplace_kernel<kCompute>>());
  m.impl("backward", CppFunction::makeFromBoxedFunction<&backward_kernel<kCompute>>());
  m.impl("backward_", CppFunction::makeFromBoxedFunction<&backward_inplace_kernel<kCompute>>());
  m.impl("double_backward", CppFunction::makeFromBoxedFunction<&double_backward_kernel<kCompute>>());
}

// CUDA autocast. torch's autocast runs a few of torch's ops in float32 (ATen's autocast_mode.cpp): softplus on its
// inputs cast to float32, softmax and log_softmax with dtype float32 where none is given; the other activations
// run in their input's type. Ours follow the same policies (the rows' autocast_to_float, softmax.cpp), so that a
// model gives the same types with either; as torch's, the operator then runs with autocast off. Eligible, as in
// torch: a floating-point CUDA tensor that is not float64.
bool autocast_eligible(const c10::IValue& value) {
  if (!value.isTensor()) return false;
  const Tensor& t = value.toTensor();
  return t.defined() && t.is_cuda() && t.is_floating_point() && t.scalar_type() != at::kDouble;
}

// A row marked autocast_to_float: its eligible tensors cast to float32 (torch's "fp32" policy).
void autocast_to_float_kernel(const c10::OperatorHandle& op, Stack* stack) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  const size_t num_arguments = op.schema().arguments().size();
  for (size_t i = 0; i < num_arguments; ++i) {
    c10::IValue& argument = torch::jit::peek(*stack, i, num_arguments);
    if (autocast_eligible(argument)) argument = argument.toTensor().to(at::kFloat);
  }
  op.callBoxed(stack);
}

}  // namespace
}  // namespace activations

TORCH_LIBRARY_IMPL(activations, AutocastCUDA, m) {
  for (const OpRow& row : kOpRows) {
    if (row.autocast_to_float) {
      m.impl(row.name, torch::CppFunction::makeFromBoxedFunction<&autocast_to_float_kernel>());
    }
  }
}

TORCH_LIBRARY_IMPL(activations, CPU, m) { register_kernels<true>(m); }
#ifdef ACTIVATIONS_WITH_CUDA
TORCH_LIBRARY_IMPL(activations, CUDA, m) { register_kernels<true>(m); }
#endif
TORCH_LIBRARY_IMPL(activations, Meta, m) { register_kernels<false>(m); }

// Softmax and log_softmax, in this unit so that torch's headers are parsed once (see softmax.cpp).
#include "softmax.cpp"

// The autograd layer and the batching rules, in this unit so that torch's headers are parsed once (see autograd.cpp).
#include "autograd.cpp"
