// sluice/asio.h — the check as an Asio asynchronous operation, for C++20 coroutines
// (boost::asio::use_awaitable), futures (use_future) or any other completion token.
//
//   boost::asio::awaitable<void> Serve(sluice::Limiter login) {
//     sluice::StatusOr<sluice::Decision> d =
//         co_await sluice::AsyncCheck(login, "account:101", {}, boost::asio::use_awaitable);
//   }
//
// The completion signature is void(StatusOr<Decision>). The handler runs on its
// associated executor (a coroutine resumes on its own executor), never inline inside
// AsyncCheck. Same errors and deadline as Limiter::Check.
//
// Thread-safety: as Limiter.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "sluice/client.h"
#include "sluice/lease.h"

namespace sluice {

// The executor of `client`'s I/O threads (ClientOptions::io_threads), for a server that
// wants its connections on the threads that talk to the store: a check started there
// (CheckAsync, CheckCompositeAsync) and answered by the store calls back on the thread
// that read the reply, and a response written from that callback leaves with no
// hand-off between threads (sluiced's HTTP listener runs this way). What runs on it
// must be short and never block: it delays every call of the client. With io_threads
// > 1 its handlers run on any of those threads: give each connection a strand. In a
// child forked after the client was made, nothing runs it.
boost::asio::io_context::executor_type IoExecutor(const Client& client);

template <typename CompletionToken>
auto AsyncCheck(const Limiter& limiter, std::string_view id, const CheckOptions& options,
                CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(StatusOr<Decision>)>(
      [](auto handler, Limiter on, std::string for_id, CheckOptions with) {
        // The handler may be move-only (coroutines); DecisionCallback must be copyable.
        using Handler = decltype(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        // Outstanding work on the handler's executor until the completion is posted, as
        // every Asio operation owes its caller: the caller's io_context cannot run out of
        // work (return from run(), be destroyed) while the result is on its way.
        auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(*shared));
        on.CheckAsync(for_id, with, [shared, work](StatusOr<Decision> result) mutable {
          boost::asio::post(work.get_executor(), [shared, result = std::move(result)]() mutable {
            (*shared)(std::move(result));
          });
          work.reset();
        });
      },
      token, limiter, std::string(id), options);
}

// Limiter::Debit as an Asio operation: void(StatusOr<Decision>), the same guarantees as
// AsyncCheck, the errors of Limiter::Debit.
//
//   auto d = co_await sluice::AsyncDebit(tokens, "account:7", 3000, {},
//   boost::asio::use_awaitable);
template <typename CompletionToken>
auto AsyncDebit(const Limiter& limiter, std::string_view id, int64_t cost,
                const CheckOptions& options, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(StatusOr<Decision>)>(
      [](auto handler, Limiter on, std::string for_id, int64_t units, CheckOptions with) {
        using Handler = decltype(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(*shared));
        on.DebitAsync(for_id, units, with, [shared, work](StatusOr<Decision> result) mutable {
          boost::asio::post(work.get_executor(), [shared, result = std::move(result)]() mutable {
            (*shared)(std::move(result));
          });
          work.reset();
        });
      },
      token, limiter, std::string(id), cost, options);
}

// The acquire of a concurrency lease as an Asio operation: completion signature
// void(StatusOr<Acquisition>), same guarantees as AsyncCheck.
//
//   auto a = co_await sluice::AsyncAcquire(streams, "user:42", {}, boost::asio::use_awaitable);
template <typename CompletionToken>
auto AsyncAcquire(const ConcurrencyLimiter& limiter, std::string_view id,
                  const AcquireOptions& options, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(StatusOr<Acquisition>)>(
      [](auto handler, ConcurrencyLimiter on, std::string for_id, AcquireOptions with) {
        using Handler = decltype(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(*shared));
        on.AcquireAsync(for_id, with, [shared, work](StatusOr<Acquisition> result) mutable {
          // The Acquisition holds a move-only Lease: carried to the handler by pointer.
          auto carried = std::make_shared<StatusOr<Acquisition>>(std::move(result));
          boost::asio::post(work.get_executor(),
                            [shared, carried]() mutable { (*shared)(std::move(*carried)); });
          work.reset();
        });
      },
      token, limiter, std::string(id), options);
}

}  // namespace sluice
