// service/accept_backoff.h — what both listeners (HTTP, gRPC) do when accept fails.
//
// Out of descriptors (EMFILE, ENFILE) or kernel memory (ENOBUFS, ENOMEM), the pending
// connection stays in the listen backlog and the listening socket stays readable:
// accepting again at once fails again at once, a busy loop on the acceptor's thread (which
// also serves connections) until something frees a descriptor. So such an error waits
// kAcceptBackoff before the next accept and is logged once per episode (not per retry).
// A connection the client reset before it was accepted (ECONNABORTED) is no such error.
// A listener must also not need a new descriptor of its own to accept: see
// CreateReactorNow.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <string_view>

#include <spdlog/spdlog.h>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

namespace sluiced {

inline constexpr std::chrono::milliseconds kAcceptBackoff{100};

// True when the next accept should wait kAcceptBackoff (see above).
inline bool AcceptNeedsBackoff(const boost::system::error_code& ec) {
  return ec && ec != boost::asio::error::connection_aborted &&
         ec != boost::asio::error::operation_aborted;
}

// Logs the start of an episode of failed accepts (`in_episode` false) and its end (an
// accept succeeded while `in_episode`); keeps `in_episode` up to date.
inline void NoteAcceptResult(std::string_view listener, const boost::system::error_code& ec,
                             bool& in_episode) {
  if (AcceptNeedsBackoff(ec)) {
    if (!in_episode)
      spdlog::warn("{} listener: accept failed ({}); retrying every {} ms until it succeeds",
                   listener, ec.message(), kAcceptBackoff.count());
    in_episode = true;
  } else if (!ec && in_episode) {
    spdlog::warn("{} listener: accepting again", listener);
    in_episode = false;
  }
}

// Creates `io`'s reactor now. Asio creates it (an epoll descriptor and an eventfd) when
// the first socket of an io_context is made, and throws if that fails: an accept handing
// its connection to an io_context without a socket yet, while descriptors are out, would
// throw on a server thread and terminate the process. Listeners call this at start for
// every io_context they hand connections to.
inline void CreateReactorNow(boost::asio::io_context& io) {
  boost::asio::ip::tcp::socket unused(io);
}

}  // namespace sluiced
