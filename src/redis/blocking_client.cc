#include "redis/blocking_client.h"

#include <hiredis/hiredis.h>

#include "core/mutex.h"
#include "redis/resp.h"

namespace sluice::internal {

BlockingClient::BlockingClient(Endpoint endpoint, BlockingClientOptions options)
    : options_(std::move(options)), work_(io_.get_executor()) {
  ConnectionOptions copts;
  copts.connect_timeout = options_.connect_timeout;
  copts.stall_timeout = options_.stall_timeout;
  copts.max_in_flight = options_.max_in_flight;
  copts.scripts = options_.scripts;
  connection_ = Connection::Make(io_.get_executor(), std::move(endpoint), std::move(copts));
  thread_ = std::thread([this] { io_.run(); });
}

BlockingClient::~BlockingClient() {
  connection_->Shutdown();
  work_.reset();
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::unique_ptr<BlockingClient>> BlockingClient::Connect(Endpoint endpoint,
                                                                  BlockingClientOptions options) {
  if (options.command_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return InvalidArgumentError("command_timeout and connect_timeout must be > 0 ms");
  }
  std::unique_ptr<BlockingClient> client(
      new BlockingClient(std::move(endpoint), std::move(options)));
  auto promise = std::make_shared<std::promise<Status>>();
  auto result = promise->get_future();
  client->connection_->Start([promise](Status status) { promise->set_value(std::move(status)); });
  if (result.wait_for(client->options_.connect_timeout + std::chrono::seconds(1)) !=
      std::future_status::ready) {
    return DeadlineExceededError("connecting to redis " + client->endpoint().Describe() +
                                 " did not finish in time");
  }
  if (Status s = result.get(); !s.ok()) return s;
  return client;
}

std::future<BlockingClient::Replies> BlockingClient::ExecAsync(std::vector<std::string> commands) {
  std::vector<Call> calls(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) calls[i].bytes = std::move(commands[i]);
  return Submit(std::move(calls));
}

std::future<BlockingClient::Replies> BlockingClient::EvalAsync(int script,
                                                               std::span<const std::string> keys,
                                                               std::span<const std::string> args) {
  const ScriptCall one{keys, args};
  return EvalManyAsync(script, std::span(&one, 1));
}

std::future<BlockingClient::Replies> BlockingClient::EvalManyAsync(
    int script, std::span<const ScriptCall> script_calls) {
  std::vector<Call> calls(script_calls.size());
  for (size_t i = 0; i < script_calls.size(); ++i) {
    const ScriptCall& s = script_calls[i];
    Call& call = calls[i];
    call.script = script;
    AppendBulk(call.bytes, static_cast<int64_t>(s.keys.size()));
    for (const std::string& k : s.keys) AppendBulk(call.bytes, k);
    for (const std::string& a : s.args) AppendBulk(call.bytes, a);
    call.tail_items = static_cast<int>(1 + s.keys.size() + s.args.size());
  }
  return Submit(std::move(calls));
}

std::future<BlockingClient::Replies> BlockingClient::Submit(std::vector<Call> calls) {
  // The calls' callbacks run on the connection's strand, the last one fulfils `promise`.
  struct Pending {
    explicit Pending(size_t n) : replies(n), left(n) {}
    Mutex mu;
    std::vector<Reply> replies SLUICE_GUARDED_BY(mu);
    size_t left SLUICE_GUARDED_BY(mu);
    Status failure SLUICE_GUARDED_BY(mu);
    std::promise<Replies> promise;  // set once: by the last callback, under mu
  };
  auto pending = std::make_shared<Pending>(calls.size());
  auto result = pending->promise.get_future();
  if (calls.empty()) {
    pending->promise.set_value(std::vector<Reply>{});
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto done = [pending, i](const Status& status, const redisReply* reply) {
      Reply copy;
      if (reply != nullptr) copy = CopyReply(*reply);
      MutexLock lock(pending->mu);
      if (reply != nullptr) {
        pending->replies[i] = std::move(copy);
      } else if (pending->failure.ok()) {
        pending->failure = status;
      }
      if (--pending->left == 0) {
        if (pending->failure.ok()) {
          pending->promise.set_value(std::move(pending->replies));
        } else {
          pending->promise.set_value(pending->failure);
        }
      }
    };
    if (calls[i].script >= 0) {
      connection_->Eval(calls[i].script, std::move(calls[i].bytes), calls[i].tail_items, deadline,
                        std::move(done));
    } else {
      connection_->Send(calls[i].bytes, deadline, std::move(done));
    }
  }
  return result;
}

BlockingClient::Replies BlockingClient::Exec(std::vector<std::string> commands) {
  return Checked(ExecAsync(std::move(commands)).get());
}

BlockingClient::Replies BlockingClient::Checked(Replies replies) const {
  if (!replies.ok()) return replies;
  for (const Reply& r : *replies) {
    if (r.type == Reply::Type::kError && !r.str.starts_with("WRONGTYPE")) {
      return ErrorReplyToStatus(r.str, endpoint().Describe());
    }
  }
  return replies;
}

StatusOr<Reply> BlockingClient::Command(const std::vector<std::string>& args) {
  std::string command;
  AppendArray(command, args.size());
  for (const std::string& a : args) AppendBulk(command, a);
  std::vector<std::string> one;
  one.push_back(std::move(command));
  Replies replies = ExecAsync(std::move(one)).get();
  if (!replies.ok()) return replies.status();
  return std::move((*replies)[0]);
}

Status BlockingClient::Unexpected(std::string_view what) const {
  return InternalError("redis " + endpoint().Describe() + " returned an unexpected reply to " +
                       std::string(what));
}

}  // namespace sluice::internal
