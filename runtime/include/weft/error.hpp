#pragma once
// One error type for the whole runtime, and a small expected-like result for the
// boundaries of parsing and loading (C++20 has no std::expected yet).

#include <cassert>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weft {

enum class ErrorCode {
  kInvalidArgument,  // a caller passed a value outside its allowed range
  kNotFound,         // a file, tensor, field or id that does not exist
  kParse,            // malformed input: JSON, tokenizer.json, safetensors header, ...
  kUnsupported,      // well-formed input naming something Weft does not implement
  kOutOfRange,       // an index or offset beyond its container
  kResourceExhausted,
  kCancelled,
  kShutdown,  // the runtime or engine is stopping or stopped
  kInternal,  // a bug: an invariant did not hold
  kIo,        // the operating system refused a read, write or map
};

std::string_view to_string(ErrorCode code) noexcept;

// What went wrong, where, and what was expected, in one sentence.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message)
      : std::runtime_error(std::move(message)), code_(code) {}

  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Either a value or an Error. `value()` on an error throws the Error, so code that cannot
// handle the failure itself may simply let it propagate.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit
  Result(Error error) : data_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    throw_if_error();
    return std::get<0>(data_);
  }
  const T& value() const& {
    throw_if_error();
    return std::get<0>(data_);
  }
  T&& value() && {
    throw_if_error();
    return std::get<0>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(data_);
  }

 private:
  void throw_if_error() const {
    if (!ok()) throw std::get<1>(data_);
  }
  std::variant<T, Error> data_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const {
    if (!ok_) throw error_;
  }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

}  // namespace weft
