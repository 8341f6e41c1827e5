#include "redis/redis_store.h"

#include <future>

#include <hiredis/hiredis.h>

#include "algo/fixed_window.h"
#include "redis/resp.h"
#include "redis/scripts.h"

namespace sluice::internal {

StatusOr<std::shared_ptr<RedisStore>> RedisStore::Connect(boost::asio::any_io_executor executor,
                                                          Endpoint endpoint,
                                                          ConnectionOptions options) {
  const auto wait = options.connect_timeout + std::chrono::seconds(1);
  options.scripts = AllScripts();
  auto connection = Connection::Make(std::move(executor), std::move(endpoint), std::move(options));
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> result = promise->get_future();
  connection->Start([promise](Status status) { promise->set_value(std::move(status)); });
  if (result.wait_for(wait) != std::future_status::ready) {
    connection->Shutdown();
    return DeadlineExceededError("connecting to redis " + connection->endpoint().Describe() +
                                 " did not finish in time");
  }
  Status status = result.get();
  if (!status.ok()) {
    connection->Shutdown();
    return status;
  }
  return std::shared_ptr<RedisStore>(new RedisStore(std::move(connection)));
}

void RedisStore::Check(CheckCall call, DecisionCallback done) {
  std::string tail;
  tail.reserve(96 + call.key.size());
  AppendBulk(tail, "1");
  AppendBulk(tail, call.key);
  AppendBulk(tail, call.limit.limit);
  AppendBulk(tail, static_cast<int64_t>(call.limit.window.count()));
  AppendBulk(tail, call.cost);
  AppendBulk(tail, call.limit.aligned ? "1" : "0");
  if (call.now_ms) {
    AppendBulk(tail, *call.now_ms);
  } else {
    AppendBulk(tail, "");
  }
  const int64_t limit = call.limit.limit;
  connection_->Eval(
      kFixedWindowScript, std::move(tail), 7, call.deadline,
      [limit, done = std::move(done)](const Status& status, const redisReply* reply) {
        if (!status.ok()) {
          done(status);
          return;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
            reply->element[0]->type != REDIS_REPLY_INTEGER ||
            reply->element[1]->type != REDIS_REPLY_INTEGER ||
            reply->element[2]->type != REDIS_REPLY_INTEGER) {
          done(InternalError("fixed_window script returned an unexpected reply"));
          return;
        }
        FixedWindowOutcome outcome{static_cast<int>(reply->element[0]->integer),
                                   reply->element[1]->integer, reply->element[2]->integer};
        done(FixedWindowDecision(outcome, limit));
      });
}

void RedisStore::Shutdown() { connection_->Shutdown(); }

ClientStats RedisStore::stats() const {
  Connection::Stats s = connection_->stats();
  return {s.commands, s.writes, s.deadline_exceeded, s.reconnects, s.noscript_retries};
}

}  // namespace sluice::internal
