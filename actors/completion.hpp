#pragma once
// Delivering a stored completion handler: always through its associated executor (a
// coroutine resumes on its own executor, a callback on the one it asked for), never inline on
// the thread that happens to finish the work (detail::deliver in weft/actor.hpp).

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_executor.hpp>
#include <tuple>
#include <utility>

#include "weft/actor.hpp"

namespace weft::actors {

template <class Signature, class... Args>
void complete(boost::asio::any_completion_handler<Signature> handler,
              const boost::asio::any_io_executor& fallback, Args&&... args) {
  auto executor = boost::asio::get_associated_executor(handler, fallback);
  weft::detail::deliver(
      executor, fallback,
      [handler = std::move(handler),
       args = std::make_tuple(std::forward<Args>(args)...)]() mutable {
        std::apply([&handler](auto&&... a) { std::move(handler)(std::forward<decltype(a)>(a)...); },
                   std::move(args));
      });
}

}  // namespace weft::actors
