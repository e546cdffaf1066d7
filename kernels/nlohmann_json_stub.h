// Stands in for <nlohmann/json.hpp>, which torch's ATen/functorch/Interpreter.h includes (for the serialize() and
// deserialize() members of functorch's Interpreter, which the batching rules in autograd.cpp never call) but
// torch's wheels do not ship. activations.py puts this file on the include path of the units that need it, as
// nlohmann/json.hpp. Only the names those headers mention; nothing here runs: those members are inline and not
// used, so they are never emitted into our library.
#pragma once

#include <stdexcept>
#include <string>

namespace nlohmann {

struct json {
  json() = default;
  template <class T>
  json(const T&) {}
  std::string dump() const { return {}; }
  static json parse(const std::string&) { return {}; }
  template <class T>
  T get() const {
    throw std::logic_error("activations: nlohmann::json is a stub here");
  }
};

}  // namespace nlohmann
