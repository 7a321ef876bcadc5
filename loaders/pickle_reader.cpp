#include "loaders/pickle_reader.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "loaders/pickle_torch_globals.hpp"

namespace weft {
namespace {

// Bounds a hostile stream cannot push past. A state dict of a large model uses a few memo
// entries per tensor and nests values a handful of levels deep.
constexpr std::size_t kMaxStack = std::size_t{1} << 20;
constexpr std::size_t kMaxMemo = std::size_t{1} << 22;
constexpr std::size_t kMaxMarks = 64;
constexpr int kMaxDepth = 64;
// Every value costs ~200 bytes however few stream bytes made it; a state dict needs about 15
// values per tensor, so this allows ~280k tensors per file and caps memory near 1 GB.
constexpr std::size_t kMaxValues = std::size_t{1} << 22;
// Names longer than this are cut in messages.
constexpr std::size_t kMaxShownName = 200;

class Machine {
 public:
  Machine(std::span<const std::byte> bytes, const std::string& origin)
      : bytes_(bytes), origin_(origin) {}

  Result<PickleRef> run();

 private:
  Error fail(const std::string& what) const {
    return Error(ErrorCode::kParse,
                 origin_ + ": pickle: " + what + " at offset " + std::to_string(op_offset_));
  }
  Error fail_unsupported(const std::string& what) const {
    return Error(ErrorCode::kUnsupported,
                 origin_ + ": pickle: " + what + " at offset " + std::to_string(op_offset_));
  }

  // Reads n bytes; nullptr (after setting error_) when the stream ends first.
  const std::byte* take(std::uint64_t n, const char* what);
  bool read_uint(int n, std::uint64_t& out, const char* what);

  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  bool need(std::size_t n, const char* op);
  PickleRef pop() {
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  bool push(PickleRef v);
  // A new value; past kMaxValues it sets error_, which stops the loop after this opcode.
  PickleRef make(PickleValue::Kind kind) {
    if (++values_ > kMaxValues && !error_) {
      error_ = fail("more than " + std::to_string(kMaxValues) + " values");
    }
    auto v = std::make_shared<PickleValue>();
    v->kind = kind;
    return v;
  }
  // Places `child` inside `parent` (sealing the child), keeping depth bounded.
  bool adopt(PickleValue& parent, PickleRef child);
  bool mutable_container(const PickleRef& target, PickleValue::Kind kind, const char* op);
  PickleRef make_sequence(PickleValue::Kind kind, std::vector<PickleRef> items);
  bool global(const std::string& module, const std::string& name);

  std::span<const std::byte> bytes_;
  const std::string& origin_;
  std::size_t pos_ = 0;
  std::size_t op_offset_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
  std::optional<Error> error_;
  std::size_t values_ = 0;
};

const std::byte* Machine::take(std::uint64_t n, const char* what) {
  if (n > bytes_.size() - pos_) {
    error_ = fail(std::string(what) + " needs " + std::to_string(n) + " bytes but only " +
                  std::to_string(bytes_.size() - pos_) + " remain (truncated or corrupt stream)");
    return nullptr;
  }
  const std::byte* p = bytes_.data() + pos_;
  pos_ += static_cast<std::size_t>(n);
  return p;
}

bool Machine::read_uint(int n, std::uint64_t& out, const char* what) {
  const std::byte* p = take(static_cast<std::uint64_t>(n), what);
  if (p == nullptr) return false;
  out = 0;
  for (int i = n - 1; i >= 0; --i)
    out = (out << 8) | static_cast<std::uint8_t>(p[i]);
  return true;
}

bool Machine::need(std::size_t n, const char* op) {
  if (stack_.size() - frame_base() >= n) return true;
  error_ = fail(std::string(op) + " needs " + std::to_string(n) +
                " value(s) on the stack above the last mark, found " +
                std::to_string(stack_.size() - frame_base()));
  return false;
}

bool Machine::push(PickleRef v) {
  if (stack_.size() >= kMaxStack) {
    error_ = fail("stack grows past " + std::to_string(kMaxStack) + " values");
    return false;
  }
  stack_.push_back(std::move(v));
  return true;
}

bool Machine::adopt(PickleValue& parent, PickleRef child) {
  if (child.get() == &parent) {
    error_ =
        fail("a " + std::string(pickle_globals::kind_name(parent.kind)) + " would contain itself");
    return false;
  }
  if (child->depth + 1 > kMaxDepth) {
    error_ = fail("values nest deeper than " + std::to_string(kMaxDepth) + " levels");
    return false;
  }
  parent.depth = std::max(parent.depth, child->depth + 1);
  child->sealed = true;
  parent.items.push_back(std::move(child));
  return true;
}

// Python's pickler fills a container before placing it in another, so a stream that changes a
// container afterwards is not one torch wrote; refusing it also rules out cycles.
bool Machine::mutable_container(const PickleRef& target, PickleValue::Kind kind, const char* op) {
  if (target->kind != kind) {
    error_ = fail(std::string(op) + " on a " + pickle_globals::kind_name(target->kind) +
                  ", expected a " + pickle_globals::kind_name(kind));
    return false;
  }
  if (target->sealed) {
    error_ = fail(std::string(op) + " changes a " + pickle_globals::kind_name(kind) +
                  " after it was placed inside another value");
    return false;
  }
  return true;
}

PickleRef Machine::make_sequence(PickleValue::Kind kind, std::vector<PickleRef> items) {
  auto v = make(kind);
  v->items.reserve(items.size());
  for (auto& item : items)
    if (!adopt(*v, std::move(item))) return nullptr;
  return v;
}

bool Machine::global(const std::string& module, const std::string& name) {
  std::string full = module + "." + name;
  if (full.size() > kMaxShownName) full = full.substr(0, kMaxShownName) + "...";
  if (!pickle_globals::is_allowed(full)) {
    error_ =
        Error(ErrorCode::kUnsupported,
              origin_ + ": pickle: global '" + full + "' at offset " + std::to_string(op_offset_) +
                  " is not allowed (allowed: " + allowed_pickle_globals() + ")");
    return false;
  }
  auto v = make(PickleValue::Kind::kGlobal);
  v->text = full;
  return push(std::move(v));
}

Result<PickleRef> Machine::run() {
  using K = PickleValue::Kind;
  while (!error_) {
    op_offset_ = pos_;
    if (pos_ == bytes_.size()) break;
    const std::byte* op_byte = take(1, "next opcode");
    if (op_byte == nullptr) break;
    const auto op = static_cast<std::uint8_t>(*op_byte);
    if (op_offset_ == 0 && op != 0x80) {
      return fail_unsupported(
          "stream does not start with PROTO (protocol 0 and 1 pickles are not supported)");
    }
    std::uint64_t n = 0;
    switch (op) {
      case 0x80:  // PROTO
        if (!read_uint(1, n, "PROTO")) break;
        if (n < 2 || n > 5)
          return fail_unsupported("protocol " + std::to_string(n) + " (2 to 5 are read)");
        break;
      case 0x95:  // FRAME: a length hint; the bytes follow inline
        if (!read_uint(8, n, "FRAME")) break;
        if (n > bytes_.size() - pos_) {
          error_ = fail("FRAME of " + std::to_string(n) + " bytes but only " +
                        std::to_string(bytes_.size() - pos_) + " remain (truncated stream)");
        }
        break;
      case '.':  // STOP
        if (!need(1, "STOP")) break;
        if (!marks_.empty()) return fail("STOP inside an unclosed MARK");
        return pop();
      case '(':  // MARK
        if (marks_.size() >= kMaxMarks) {
          error_ = fail("MARKs nest deeper than " + std::to_string(kMaxMarks));
          break;
        }
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        if (need(1, "POP")) stack_.pop_back();
        break;
      case '1':  // POP_MARK
        if (marks_.empty()) {
          error_ = fail("POP_MARK without a MARK");
          break;
        }
        stack_.resize(marks_.back());
        marks_.pop_back();
        break;
      case '2':  // DUP
        if (need(1, "DUP")) push(stack_.back());
        break;
      case 'N':
        push(make(K::kNone));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        auto v = make(K::kBool);
        v->boolean = op == 0x88;
        push(std::move(v));
        break;
      }
      case 'K':
      case 'M':
      case 'J': {  // BININT1, BININT2 (unsigned), BININT (signed 32-bit)
        const int width = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if (!read_uint(width, n, "BININT")) break;
        auto v = make(K::kInt);
        v->integer = op == 'J' ? static_cast<std::int32_t>(static_cast<std::uint32_t>(n))
                               : static_cast<std::int64_t>(n);
        push(std::move(v));
        break;
      }
      case 0x8a:
      case 0x8b: {  // LONG1, LONG4: little-endian two's complement
        if (!read_uint(op == 0x8a ? 1 : 4, n, "LONG length")) break;
        if (n > 8) {
          error_ =
              fail_unsupported("integer of " + std::to_string(n) + " bytes (at most 8 are read)");
          break;
        }
        const std::byte* p = take(n, "LONG");
        if (p == nullptr) break;
        std::uint64_t u = 0;
        for (int i = static_cast<int>(n) - 1; i >= 0; --i)
          u = (u << 8) | static_cast<std::uint8_t>(p[i]);
        if (n > 0 && n < 8 && (static_cast<std::uint8_t>(p[n - 1]) & 0x80) != 0) {
          u |= ~std::uint64_t{0} << (8 * n);  // sign-extend
        }
        auto v = make(K::kInt);
        v->integer = static_cast<std::int64_t>(u);
        push(std::move(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        if (!read_uint(8, n, "BINFLOAT")) break;
        std::uint64_t be = 0;
        for (int i = 0; i < 8; ++i)
          be = (be << 8) | ((n >> (8 * i)) & 0xff);
        auto v = make(K::kFloat);
        v->real = std::bit_cast<double>(be);
        push(std::move(v));
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d:
      case 'B':
      case 'C':
      case 0x8e: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINBYTES, SHORT_BINBYTES,
                    // BINBYTES8
        const bool text = op == 'X' || op == 0x8c || op == 0x8d;
        const int width = (op == 0x8c || op == 'C') ? 1 : (op == 0x8d || op == 0x8e) ? 8 : 4;
        const char* what = text ? "string" : "bytes";
        if (!read_uint(width, n, what)) break;
        const std::byte* p = take(n, what);
        if (p == nullptr) break;
        auto v = make(text ? K::kString : K::kBytes);
        v->text.assign(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
        push(std::move(v));
        break;
      }
      case '}':
        push(make(K::kDict));
        break;
      case ']':
        push(make(K::kList));
        break;
      case ')':
        push(make(K::kTuple));
        break;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const std::size_t count = op - 0x84u;
        if (!need(count, "TUPLEn")) break;
        std::vector<PickleRef> items(stack_.end() - static_cast<std::ptrdiff_t>(count),
                                     stack_.end());
        stack_.resize(stack_.size() - count);
        if (auto t = make_sequence(K::kTuple, std::move(items))) push(std::move(t));
        break;
      }
      case 't':    // TUPLE
      case 'e':    // APPENDS
      case 'u': {  // SETITEMS
        if (marks_.empty()) {
          error_ = fail("TUPLE/APPENDS/SETITEMS without a MARK");
          break;
        }
        const std::size_t base = marks_.back();
        marks_.pop_back();
        std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(base),
                                     stack_.end());
        stack_.resize(base);
        if (op == 't') {
          if (auto t = make_sequence(K::kTuple, std::move(items))) push(std::move(t));
          break;
        }
        if (!need(1, op == 'e' ? "APPENDS" : "SETITEMS")) break;
        auto& target = stack_.back();
        if (!mutable_container(target, op == 'e' ? K::kList : K::kDict,
                               op == 'e' ? "APPENDS" : "SETITEMS")) {
          break;
        }
        if (op == 'u' && items.size() % 2 != 0) {
          error_ = fail("SETITEMS with an odd number of keys and values");
          break;
        }
        for (auto& item : items)
          if (!adopt(*target, std::move(item))) break;
        break;
      }
      case 'a':    // APPEND
      case 's': {  // SETITEM
        const std::size_t count = op == 'a' ? 2 : 3;
        if (!need(count, op == 'a' ? "APPEND" : "SETITEM")) break;
        auto& target = stack_[stack_.size() - count];
        if (!mutable_container(target, op == 'a' ? K::kList : K::kDict,
                               op == 'a' ? "APPEND" : "SETITEM")) {
          break;
        }
        for (std::size_t i = stack_.size() - count + 1; i < stack_.size(); ++i)
          if (!adopt(*target, stack_[i])) break;
        stack_.resize(stack_.size() - count + 1);
        break;
      }
      case 'q':
      case 'r':
      case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
        if (op == 0x94) {
          n = memo_.size();
        } else if (!read_uint(op == 'q' ? 1 : 4, n, "BINPUT")) {
          break;
        }
        if (!need(1, "BINPUT/MEMOIZE")) break;
        if (memo_.size() >= kMaxMemo && memo_.find(n) == memo_.end()) {
          error_ = fail("memo grows past " + std::to_string(kMaxMemo) + " entries");
          break;
        }
        memo_[n] = stack_.back();
        break;
      }
      case 'h':
      case 'j': {  // BINGET, LONG_BINGET
        if (!read_uint(op == 'h' ? 1 : 4, n, "BINGET")) break;
        auto it = memo_.find(n);
        if (it == memo_.end()) {
          error_ = fail("memo index " + std::to_string(n) + " was never stored (memo holds " +
                        std::to_string(memo_.size()) + " entries)");
          break;
        }
        push(it->second);
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string parts[2];
        for (auto& part : parts) {
          const std::size_t start = pos_;
          while (pos_ < bytes_.size() && bytes_[pos_] != std::byte{'\n'} && pos_ - start < 256)
            ++pos_;
          if (pos_ >= bytes_.size() || bytes_[pos_] != std::byte{'\n'}) {
            error_ = fail("GLOBAL name is unterminated or longer than 256 bytes");
            break;
          }
          part.assign(reinterpret_cast<const char*>(bytes_.data() + start), pos_ - start);
          ++pos_;
        }
        if (!error_) global(parts[0], parts[1]);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        if (!need(2, "STACK_GLOBAL")) break;
        auto name = pop();
        auto module = pop();
        if (module->kind != K::kString || name->kind != K::kString) {
          error_ = fail("STACK_GLOBAL needs two strings");
          break;
        }
        global(module->text, name->text);
        break;
      }
      case 'R':     // REDUCE
      case 0x81: {  // NEWOBJ (cls, args): the allowed classes build the same way
        if (!need(2, op == 'R' ? "REDUCE" : "NEWOBJ")) break;
        auto args = pop();
        auto callable = pop();
        auto v = pickle_globals::call(*callable, *args);
        if (!v) {
          error_ = fail(v.error().what());
          break;
        }
        args->sealed = true;
        push(std::move(v.value()));
        break;
      }
      case 'b': {  // BUILD: torch sets a state dict's _metadata this way; the state is dropped
        if (!need(2, "BUILD")) break;
        auto state = pop();
        const auto& target = stack_.back();
        if (target->kind != K::kDict && target->kind != K::kTensor) {
          error_ = fail(std::string("BUILD on a ") + pickle_globals::kind_name(target->kind) +
                        ", expected a dict or tensor");
        }
        break;
      }
      case 'Q': {  // BINPERSID
        if (!need(1, "BINPERSID")) break;
        auto pid = pop();
        auto v = pickle_globals::storage_from_persistent_id(*pid);
        if (!v) {
          error_ = fail(v.error().what());
          break;
        }
        push(std::move(v.value()));
        break;
      }
      default: {
        const char c = static_cast<char>(op);
        const bool printable = op >= 0x20 && op < 0x7f;
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        error_ = fail_unsupported(std::string("opcode ") + hex +
                                  (printable ? std::string(" ('") + c + "')" : std::string()) +
                                  " is not supported by the restricted unpickler");
      }
    }
  }
  if (error_) return *error_;
  return fail("stream ended without STOP (truncated)");
}

}  // namespace

Result<PickleRef> read_pickle(std::span<const std::byte> bytes, const std::string& origin) {
  Machine machine(bytes, origin);
  return machine.run();
}

}  // namespace weft
