// What the operators (activations.cpp) and the autograd layer (autograd.cpp) both need to read an operator call:
// its row of the op table, and the functor arguments its parameters stand for.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_map>

#include "op_table.h"

namespace activations {

// The row of an operator (name or name_, with or without the "activations::" prefix), or of an activation name.
inline const OpRow& op_row(std::string_view name) {
  static const std::unordered_map<std::string_view, const OpRow*> rows = [] {
    std::unordered_map<std::string_view, const OpRow*> map;
    for (const OpRow& row : kOpRows) map.emplace(row.name, &row);
    return map;
  }();
  if (name.substr(0, 13) == "activations::") name.remove_prefix(13);
  auto found = rows.find(name);
  if (found == rows.end() && !name.empty() && name.back() == '_') found = rows.find(name.substr(0, name.size() - 1));
  TORCH_CHECK(found != rows.end(), "activations: unknown activation '", std::string(name), "'");
  return *found->second;
}

// The functor's arguments: the parameters (a str parameter as the index of its value among the row's choices),
// then the row's constants.
struct FunctorArgs {
  std::array<double, 4> values{};
  int count = 0;
  const double* data() const { return values.data(); }
  void push(double v) { values[count++] = v; }
};

// The index of `value` among "a|b|c", or -1.
inline int choice_index(std::string_view choices, std::string_view value) {
  int index = 0;
  for (size_t start = 0;; ++index) {
    const size_t end = std::min(choices.find('|', start), choices.size());
    if (choices.substr(start, end - start) == value) return index;
    if (end == choices.size()) return -1;
    start = end + 1;
  }
}

inline std::string parameter_name(const OpRow& row, int i) {
  // The schema's arguments read "(Tensor input, float negative_slope=0.01, ...)": the name of parameter i.
  std::string_view arguments(row.arguments);
  for (int skipped = 0; skipped <= i; ++skipped) arguments.remove_prefix(arguments.find(',') + 1);
  arguments.remove_prefix(arguments.find_first_not_of(" *,"));
  arguments.remove_prefix(arguments.find(' ') + 1);
  return std::string(arguments.substr(0, arguments.find('=')));
}

// params: the call's parameters after x, as the schema gave them.
inline FunctorArgs functor_args(const OpRow& row, const c10::IValue* params) {
  FunctorArgs args;
  for (int i = 0; i < row.num_params; ++i) {
    const char* choices = row.choices[i];
    if (choices != nullptr && choices[0] != '\0') {
      const std::string value(params[i].toStringRef());
      const int index = choice_index(choices, value);
      TORCH_CHECK(index >= 0, "activations.", row.name, ": ", parameter_name(row, i), " must be one of '", choices,
                  "' (separated by '|'), got '", value, "'");
      args.push(index);
    } else {
      const double value = params[i].toDouble();
      // The number is formatted by std::to_string: streaming a double into the message crashed with torch 2.11.
      TORCH_CHECK(std::isfinite(value), "activations.", row.name, ": ", parameter_name(row, i),
                  " must be a finite number, got ", std::to_string(value));
      args.push(value);
    }
  }
  // A ValueError in Python, as torch.nn.functional.hardtanh raises.
  TORCH_CHECK_VALUE(!row.bounds || args.values[0] <= args.values[1], "activations.", row.name, ": ",
                    parameter_name(row, 0), " cannot be greater than ", parameter_name(row, 1), ", got ",
                    std::to_string(args.values[0]), " and ", std::to_string(args.values[1]));
  for (int i = 0; i < row.num_constants; ++i) args.push(row.constants[i]);
  return args;
}

// The arguments an internal operator received as float[] (already resolved by functor_args).
inline FunctorArgs functor_args(c10::ArrayRef<double> values) {
  FunctorArgs args;
  TORCH_CHECK(values.size() <= args.values.size(), "activations: too many functor arguments");
  for (double v : values) args.push(v);
  return args;
}

}  // namespace activations
