#pragma once
// A bench's command line read flag by flag, for the benches that parse their own: each flag,
// its value, and its value as a whole number, a missing or malformed value thrown as a
// std::runtime_error that names the flag (the bench prints it above its usage).

#include <stdexcept>
#include <string>

namespace weft::bench {

class ArgCursor {
 public:
  ArgCursor(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Moves to the next flag; false past the last argument.
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const noexcept { return flag_; }

  // The argument after the flag, consumed.
  std::string value() {
    if (i_ + 1 >= argc_) throw std::runtime_error(flag_ + ": needs a value");
    return argv_[++i_];
  }

  // The value as an int: all of it (`8x` is refused, not read as 8).
  int number() {
    const std::string v = value();
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) throw std::runtime_error(flag_ + ": not a number: " + v);
    return n;
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace weft::bench
