// BlockingClient: blocking calls over one pipelined Connection on a private I/O thread,
// for code that waits for its answers (the admin API, the CLI's operator commands, the
// test fixture). Every command is still pipelined: ExecAsync sends a whole batch at
// once and returns a future, so a caller can keep several batches in flight.
//
// Replies come back copied (Reply). Each call carries command_timeout as its deadline;
// the connection is replaced when Redis sends nothing for stall_timeout.
//
// Thread-safety: thread-safe (calls may come from any thread; the futures are waited for
// by whoever holds them). Must not be called on its own I/O thread (there is none a
// caller could be on: callbacks never leave this class).
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/reply.h"
#include "sluice/status.h"

namespace sluice::internal {

struct BlockingClientOptions {
  std::chrono::milliseconds connect_timeout{2000};
  // Deadline of each command or batch, counted from when it is sent.
  std::chrono::milliseconds command_timeout{10000};
  // The connection is closed (calls in flight fail Unavailable) when Redis has sent
  // nothing for this long while calls wait.
  std::chrono::milliseconds stall_timeout{30000};
  std::size_t max_in_flight = 1'000'000;
  // Loaded at connect; EvalAsync's `script` indexes this list.
  std::vector<Script> scripts;
};

class BlockingClient {
 public:
  using Replies = StatusOr<std::vector<Reply>>;

  // Connects (Connection::Start: AUTH, SELECT, Redis >= 7.0, SCRIPT LOAD) and waits for
  // the outcome, at most connect_timeout plus a second.
  static StatusOr<std::unique_ptr<BlockingClient>> Connect(Endpoint endpoint,
                                                           BlockingClientOptions options);
  ~BlockingClient();
  BlockingClient(const BlockingClient&) = delete;
  BlockingClient& operator=(const BlockingClient&) = delete;

  // Sends `commands` (each made by FormatCommand) pipelined; the future holds every reply
  // in order (error replies included, as kError), or the transport's error (deadline,
  // connection lost) when any command got no reply.
  std::future<Replies> ExecAsync(std::vector<std::string> commands);
  // EVALSHA of options.scripts[script] with `keys` and `args`: one reply.
  std::future<Replies> EvalAsync(int script, std::span<const std::string> keys,
                                 std::span<const std::string> args);
  // Several EVALSHAs of options.scripts[script], pipelined: one reply per call, in order
  // (e.g. one call per cluster slot, where a script may touch one slot only).
  struct ScriptCall {
    std::span<const std::string> keys;
    std::span<const std::string> args;
  };
  std::future<Replies> EvalManyAsync(int script, std::span<const ScriptCall> calls);
  // ExecAsync, waited for, through Checked.
  Replies Exec(std::vector<std::string> commands);
  // `replies`, or the code of its first error reply other than WRONGTYPE (which callers
  // read as "a key that is not sluice's").
  Replies Checked(Replies replies) const;
  // One command given as its arguments; the reply (an error reply included), or the
  // transport's error.
  StatusOr<Reply> Command(const std::vector<std::string>& args);

  // InternalError naming the server and what it answered unexpectedly.
  Status Unexpected(std::string_view what) const;
  const Endpoint& endpoint() const { return connection_->endpoint(); }
  const BlockingClientOptions& options() const { return options_; }

 private:
  struct Call {
    int script = -1;    // >= 0: EVALSHA of that script, `bytes` its tail
    std::string bytes;  // a formatted command, or the script call's tail
    int tail_items = 0;
  };
  BlockingClient(Endpoint endpoint, BlockingClientOptions options);
  std::future<Replies> Submit(std::vector<Call> calls);

  BlockingClientOptions options_;
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  std::shared_ptr<Connection> connection_;
};

}  // namespace sluice::internal
