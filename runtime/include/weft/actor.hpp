#pragma once
// The actor base. An actor is a class that owns a strand: its state is touched only by
// handlers running on that strand, so it needs no locks. Other code talks to it through its
// public methods, which post plain message structs (moved by value) to the strand.
//
// Replies use Asio completion tokens, so one method serves every caller style:
//
//   class Counter : public weft::Actor {
//    public:
//     using Actor::Actor;
//     void add(int n) { post([this, n] { total_ += n; }); }
//     template <class Token>
//     auto total(Token&& token) {
//       return ask([this] { return total_; }, std::forward<Token>(token));
//     }
//    private:
//     int total_ = 0;  // touched only on the strand
//   };
//
//   counter.total([](std::exception_ptr e, int n) { ... });   // callback
//   std::future<int> f = counter.total(asio::use_future);      // future
//   int n = co_await counter.total(asio::use_awaitable);       // coroutine
//
// A reply's completion signature is void(std::exception_ptr, R) (void(std::exception_ptr) when
// R is void). An exception thrown by the handler becomes that exception_ptr: a future's get()
// and co_await rethrow it; it never escapes into the thread that ran the handler. For
// fire-and-forget messages (post), an exception is logged and counted
// (unhandled_handler_exceptions()) and the actor keeps serving.
//
// Lifetime: handlers capture the actor, so an actor must outlive the work posted to it.
// Destroy actors after Runtime::shutdown() has joined the threads that run them.

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/strand.hpp>
#include <cstddef>
#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>

namespace weft {

namespace asio = boost::asio;

// How many exceptions escaped fire-and-forget handlers (and worker loops) in this process.
std::size_t unhandled_handler_exceptions() noexcept;

namespace detail {

void report_unhandled_exception(std::exception_ptr error, std::string_view where) noexcept;

template <class R>
struct ReplySignature {
  using type = void(std::exception_ptr, R);
};
template <>
struct ReplySignature<void> {
  using type = void(std::exception_ptr);
};

// Runs `f` on `target`, never inline on the calling thread. Executors that can be required
// not to block get a plain post; a type-erased completion executor (what a stored
// any_completion_handler carries) cannot, so the call first hops to `hop` (an ordinary
// executor) and dispatches from there.
template <class Target, class Fn>
void deliver(const Target& target, const asio::any_io_executor& hop, Fn&& f) {
  if constexpr (asio::is_executor<Target>::value ||
                asio::can_require<Target, asio::execution::blocking_t::never_t>::value) {
    asio::post(target, std::forward<Fn>(f));
  } else {
    asio::post(
        hop, [target, f = std::forward<Fn>(f)]() mutable { asio::dispatch(target, std::move(f)); });
  }
}

// Runs `fn` (on the actor's strand) and delivers its result or exception to `handler` through
// the handler's executor, so the caller's code never runs on the actor's strand unless it
// asked to.
template <class R, class Fn, class Handler, class Work>
void run_and_reply(Fn& fn, Handler& handler, Work& work, const asio::any_io_executor& hop) {
  auto executor = work.get_executor();
  std::exception_ptr error;
  if constexpr (std::is_void_v<R>) {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    deliver(executor, hop,
            [handler = std::move(handler), error]() mutable { std::move(handler)(error); });
  } else {
    static_assert(std::is_default_constructible_v<R>,
                  "an actor's reply type must be default-constructible: it is what the caller "
                  "receives alongside an exception");
    R result{};
    try {
      result = fn();
    } catch (...) {
      error = std::current_exception();
    }
    deliver(executor, hop,
            [handler = std::move(handler), error, result = std::move(result)]() mutable {
              std::move(handler)(error, std::move(result));
            });
  }
  work.reset();
}

}  // namespace detail

class Actor {
 public:
  using Strand = asio::strand<asio::any_io_executor>;

  explicit Actor(const asio::any_io_executor& executor) : strand_(asio::make_strand(executor)) {}
  // An actor on another actor's strand: a strand may serve several actors whose state is
  // touched together (the scheduler and the KV allocator), with no locks and no hops between
  // them. Each still touches only its own state, and only on the strand.
  explicit Actor(const Strand& shared) : strand_(shared) {}
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  const Strand& strand() const noexcept { return strand_; }

 protected:
  // A fire-and-forget message: `fn` runs on the strand, after every message posted before it.
  template <class Fn>
  void post(Fn&& fn) {
    asio::post(strand_, [fn = std::forward<Fn>(fn)]() mutable {
      try {
        fn();
      } catch (...) {
        detail::report_unhandled_exception(std::current_exception(), "actor message");
      }
    });
  }

  // A request with a reply: `fn` runs on the strand and its return value (or exception) is
  // delivered through `token`. Callbacks with no associated executor run on the pool that
  // runs this actor, not on its strand.
  template <class Fn, class Token>
  auto ask(Fn&& fn, Token&& token) {
    using R = std::invoke_result_t<std::decay_t<Fn>&>;
    using Signature = typename detail::ReplySignature<R>::type;
    return asio::async_initiate<Token, Signature>(
        [strand = strand_](auto handler, std::decay_t<Fn> work_fn) {
          auto work = asio::make_work_guard(
              asio::get_associated_executor(handler, strand.get_inner_executor()));
          asio::post(strand, [work_fn = std::move(work_fn), handler = std::move(handler),
                              work = std::move(work), hop = strand.get_inner_executor()]() mutable {
            detail::run_and_reply<R>(work_fn, handler, work, hop);
          });
        },
        token, std::forward<Fn>(fn));
  }

 private:
  Strand strand_;
};

}  // namespace weft
