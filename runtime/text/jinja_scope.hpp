#pragma once
// The names bound in one scope of a template's render (jinja_eval.cpp).

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/text/jinja_value.hpp"

namespace weft::jinja {

// The names of one scope. Most scopes hold a few (a loop's `loop` and targets, a macro's
// parameters) and are made once per iteration or call, where a hash map allocated its bucket
// array and a node per name each time: a vector searched in place, with a hash index once a
// scope (the template's globals, `set` at top level) grows past a few names. A value found or
// added stays where it is until the next name is added to the same scope (statements add names
// only to the innermost scope, and a macro call pushes its own).
class JinjaScope {
 public:
  Value& operator[](const std::string& name) {
    if (auto* v = find_value(name)) return *v;
    if (names_.empty()) names_.reserve(4);
    names_.emplace_back(name, Value());
    if (!index_.empty()) {
      index_.emplace(name, names_.size() - 1);
    } else if (names_.size() > kIndexAbove) {
      for (std::size_t i = 0; i < names_.size(); ++i)
        index_.emplace(names_[i].first, i);
    }
    return names_.back().second;
  }
  const Value* find(const std::string& name) const {
    return const_cast<JinjaScope*>(this)->find_value(name);
  }

 private:
  static constexpr std::size_t kIndexAbove = 16;
  Value* find_value(const std::string& name) {
    if (!index_.empty()) {
      auto it = index_.find(name);
      return it == index_.end() ? nullptr : &names_[it->second].second;
    }
    for (auto& [k, v] : names_)
      if (k == name) return &v;
    return nullptr;
  }
  std::vector<std::pair<std::string, Value>> names_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace weft::jinja
