#include "redis/redis_store.h"

#include <cstdlib>
#include <future>

#include <hiredis/hiredis.h>

#include "algo/algorithm.h"
#include "redis/crc16.h"
#include "redis/resp.h"
#include "redis/scripts.h"

namespace sluice::internal {

StatusOr<std::shared_ptr<RedisStore>> RedisStore::Connect(boost::asio::any_io_executor executor,
                                                          Endpoint endpoint,
                                                          ConnectionOptions options,
                                                          bool in_background, Mode mode) {
  const auto wait = options.connect_timeout + std::chrono::seconds(1);
  options.scripts = AllScripts();
  options.batch_script = kBatchScript;
  options.asking = mode.asking;  // every command after ASKING: calls go alone
  const ConnectionOptions subscriber_options = options;
  auto connection = Connection::Make(executor, std::move(endpoint), std::move(options));
  auto make = [&] {
    return std::shared_ptr<RedisStore>(
        new RedisStore(std::move(connection), mode, executor, subscriber_options));
  };
  if (in_background) {
    connection->Start(nullptr);
    return make();
  }
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
  return make();
}

std::shared_ptr<void> RedisStore::WatchLeaseSet(const std::string& key,
                                                std::function<void()> wake) {
  if (mode_.cluster) return nullptr;
  std::shared_ptr<Subscriber> subscriber;
  {
    MutexLock lock(subscriber_mu_);
    if (shut_down_) return nullptr;
    if (!subscriber_) {
      subscriber_ = Subscriber::Start(executor_, connection_->endpoint(), options_);
    }
    subscriber = subscriber_;
  }
  return subscriber->Watch(key, std::move(wake));
}

uint32_t RedisStore::BatchTag(std::string_view key) const {
  if (!mode_.cluster) return 0;
  return mode_.cross_slot_batches && !mode_.asking ? Connection::kAnySlot : KeySlot(key);
}

namespace {

// The arguments Check writes: what the batch manifest says every algorithm takes (its
// 7 and the block, src/algo/block.lua).
constexpr int kAlgorithmArguments = 8;
constexpr bool EveryAlgorithmTakes(int arguments) {
  for (int f = 0; f < batch_manifest::kAlgorithmCount; ++f) {
    if (batch_manifest::kArity[f] != arguments) return false;
  }
  return true;
}
static_assert(EveryAlgorithmTakes(kAlgorithmArguments));

}  // namespace

void RedisStore::Check(CheckCall call, DecisionCallback done) {
  const AlgoArgs args = ArgsFor(call.op, call.cost, call.limit, call.block_ms);
  std::string tail;
  tail.reserve(96);
  AppendBulk(tail, static_cast<int64_t>(args.op));
  if (call.now_ms) {
    AppendBulk(tail, *call.now_ms);
  } else {
    AppendBulk(tail, "");
  }
  AppendBulk(tail, args.cost);
  AppendBulk(tail, args.limit);
  AppendBulk(tail, args.window_ms);
  AppendBulk(tail, args.refill);
  AppendBulk(tail, args.aligned ? "1" : "0");
  AppendBulk(tail, args.block_ms);
  const int64_t limit = call.limit.limit;
  const Op op = call.op;
  const int script = static_cast<int>(call.limit.algorithm);
  const uint32_t tag = BatchTag(call.key);
  connection_->Call(
      {.script = script,
       .function = script,
       .key = std::move(call.key),
       .args = std::move(tail),
       .arg_items = kAlgorithmArguments,
       .batch_tag = tag},
      call.deadline,
      [limit, op, done = std::move(done)](const Status& status, const redisReply* reply) {
        if (!status.ok()) {
          done(status);
          return;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
          done(InternalError("a sluice script returned an unexpected reply"));
          return;
        }
        for (size_t i = 0; i < 4; ++i) {
          if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
            done(InternalError("a sluice script returned a non-integer field"));
            return;
          }
        }
        AlgoReply r{static_cast<int>(reply->element[0]->integer), reply->element[1]->integer,
                    reply->element[2]->integer, reply->element[3]->integer};
        done(MakeDecision(r, limit, op));
      });
}

void RedisStore::CheckComposite(CompositeCall call, CompositeCallback done) {
  std::vector<CheckCall>& calls = call.calls;
  if (calls.empty() || calls.size() > kMaxCompositeCalls) {
    done(InvalidArgumentError("a composite check takes 1 to " + std::to_string(kMaxCompositeCalls) +
                              " limits, got " + std::to_string(calls.size())));
    return;
  }
  // src/algo/composite.lua: KEYS, then now, cost, and per limit algorithm, limit, window,
  // refill, aligned, block.
  std::string tail;
  tail.reserve(32 + 64 * calls.size());
  AppendBulk(tail, static_cast<int64_t>(calls.size()));
  for (const CheckCall& c : calls) AppendBulk(tail, c.key);
  if (calls[0].now_ms) {
    AppendBulk(tail, *calls[0].now_ms);
  } else {
    AppendBulk(tail, "");
  }
  AppendBulk(tail, calls[0].cost);
  std::vector<int64_t> limits;
  limits.reserve(calls.size());
  for (const CheckCall& c : calls) {
    AppendBulk(tail, static_cast<int64_t>(c.limit.algorithm));
    AppendBulk(tail, c.limit.limit);
    AppendBulk(tail, c.limit.window.count());
    AppendBulk(tail, c.limit.refill);
    AppendBulk(tail, c.limit.aligned ? "1" : "0");
    AppendBulk(tail, c.block_ms);
    limits.push_back(c.limit.limit);
  }
  const int items = 3 + 7 * static_cast<int>(calls.size());
  connection_->Eval(
      kCompositeScript, std::move(tail), items, calls[0].deadline,
      [limits = std::move(limits), done = std::move(done)](const Status& status,
                                                           const redisReply* reply) {
        if (!status.ok()) {
          done(status);
          return;
        }
        const auto bad = [&done] {
          done(InternalError("the composite script returned an unexpected reply"));
        };
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 5) return bad();
        for (size_t i = 0; i < reply->elements; ++i) {
          if (reply->element[i]->type != REDIS_REPLY_INTEGER) return bad();
        }
        const auto at = [reply](size_t i) { return reply->element[i]->integer; };
        const auto reply_at = [&at](size_t i) {
          return AlgoReply{static_cast<int>(at(i)), at(i + 1), at(i + 2), at(i + 3)};
        };
        const long long refused = at(0);
        CompositeOutcome out;
        if (refused != 0) {
          if (reply->elements != 5 || refused < 0 || static_cast<size_t>(refused) > limits.size()) {
            return bad();
          }
          const size_t index = static_cast<size_t>(refused) - 1;
          out.refused_by = index;
          out.decisions.push_back(MakeDecision(reply_at(1), limits[index]));
        } else {
          if (reply->elements != 1 + 4 * limits.size()) return bad();
          for (size_t i = 0; i < limits.size(); ++i) {
            out.decisions.push_back(MakeDecision(reply_at(1 + 4 * i), limits[i]));
          }
        }
        done(std::move(out));
      });
}

namespace {

// How long the release of a grant that arrived after its caller gave up may take.
constexpr std::chrono::seconds kLateReleaseDeadline{2};

bool IsInteger(const redisReply* r) {
  return r->type == REDIS_REPLY_INTEGER;
}

// The reply of concurrency.lua for `op` (see the script's header).
StatusOr<LeaseReply> ParseLeaseReply(LeaseOp op, const redisReply* reply) {
  if (reply->type != REDIS_REPLY_ARRAY) {
    return InternalError("the concurrency script returned an unexpected reply");
  }
  LeaseReply out;
  if (op == LeaseOp::kList) {
    if (reply->elements < 1 || reply->elements % 2 != 1 || !IsInteger(reply->element[0])) {
      return InternalError("the concurrency script returned an unexpected list");
    }
    out.code = 1;
    out.now_ms = reply->element[0]->integer;
    for (size_t i = 1; i + 1 < reply->elements; i += 2) {
      const redisReply* member = reply->element[i];
      const redisReply* expires = reply->element[i + 1];
      if (member->type != REDIS_REPLY_STRING || !IsInteger(expires)) {
        return InternalError("the concurrency script returned an unexpected lease row");
      }
      out.rows.push_back({std::string(member->str, member->len), expires->integer});
    }
    return out;
  }
  if (reply->elements != 4)
    return InternalError("the concurrency script returned an unexpected reply");
  for (size_t i = 0; i < 4; ++i) {
    if (!IsInteger(reply->element[i])) {
      return InternalError("the concurrency script returned a non-integer field");
    }
  }
  out.code = static_cast<int>(reply->element[0]->integer);
  out.count = reply->element[1]->integer;
  out.now_ms = reply->element[2]->integer;
  out.expires_at_ms = reply->element[3]->integer;
  return out;
}

}  // namespace

void RedisStore::RunLease(LeaseCall call, LeaseCallback done) {
  const LeaseOp op = call.args.op;
  if (op == LeaseOp::kRelease) {
    // Nothing to check: one command, whatever the lease's state (in a batch, the batch
    // script's release function: the same ZREM).
    std::string token;
    AppendBulk(token, call.args.token);
    const uint32_t tag = BatchTag(call.key);
    // A release that removed a lease wakes the id's waiters (src/algo/concurrency.lua,
    // "Waiting acquires"): SPUBLISH on the channel named after the key, written after the
    // ZREM's answer, off the caller's path (no subscriber: a hash lookup in Redis).
    auto wake = [weak = std::weak_ptr<Connection>(connection_), key = call.key] {
      if (auto connection = weak.lock()) {
        connection->Send(FormatCommand({"SPUBLISH", key, ""}),
                         std::chrono::steady_clock::now() + kLateReleaseDeadline,
                         [](const Status&, const redisReply*) {});
      }
    };
    connection_->Call({.command = "ZREM",
                       .function = kReleaseFunction,
                       .key = std::move(call.key),
                       .args = std::move(token),
                       .arg_items = batch_manifest::kArity[kReleaseFunction],
                       .batch_tag = tag},
                      call.deadline,
                      [done = std::move(done), wake = std::move(wake)](const Status& status,
                                                                       const redisReply* reply) {
                        if (!status.ok()) {
                          done(status);
                        } else if (reply->type != REDIS_REPLY_INTEGER) {
                          done(InternalError("ZREM returned an unexpected reply"));
                        } else {
                          if (reply->integer == 1) wake();
                          done(LeaseResult{LeaseReply{.code = 1}});
                        }
                      });
    return;
  }
  std::string tail;
  tail.reserve(64 + call.args.token.size());
  AppendBulk(tail, static_cast<int64_t>(op));
  if (call.now_ms) {
    AppendBulk(tail, *call.now_ms);
  } else {
    AppendBulk(tail, "");
  }
  AppendBulk(tail, call.args.token);
  AppendBulk(tail, call.args.limit);
  AppendBulk(tail, call.args.ttl_ms);
  const bool queue_op = op == LeaseOp::kWait || op == LeaseOp::kLeave;
  if (queue_op) {
    // Sent alone (the batch function takes 5 arguments): the ticket's ttl and the bound.
    AppendBulk(tail, call.args.ticket_ttl_ms);
    AppendBulk(tail, call.args.max_waiters);
  }
  // An acquire whose deadline passed may still run in Redis (a stalled server runs it on
  // resume) and grant a lease that nobody holds: that grant is released as soon as its
  // reply arrives, instead of keeping the slot for the whole lease_ttl.
  Connection::Callback late;
  if (op == LeaseOp::kAcquire || op == LeaseOp::kWait) {
    late = [weak = std::weak_ptr<Connection>(connection_), key = call.key, token = call.args.token](
               const Status& status, const redisReply* reply) {
      auto connection = weak.lock();
      if (!connection || !status.ok()) return;
      StatusOr<LeaseReply> parsed = ParseLeaseReply(LeaseOp::kAcquire, reply);
      if (!parsed.ok() || parsed->code != 1) return;
      connection->Send(FormatCommand({"ZREM", key, LeaseMember(parsed->now_ms, token)}),
                       std::chrono::steady_clock::now() + kLateReleaseDeadline,
                       [](const Status&, const redisReply*) {});
    };
  }
  auto on_reply = [op, done = std::move(done)](const Status& status, const redisReply* reply) {
    if (!status.ok()) {
      done(status);
      return;
    }
    StatusOr<LeaseReply> parsed = ParseLeaseReply(op, reply);
    if (!parsed.ok()) {
      done(parsed.status());
    } else {
      done(LeaseResult{*std::move(parsed)});
    }
  };
  if (queue_op) {
    std::string head;
    AppendBulk(head, "1");
    AppendBulk(head, call.key);
    connection_->Eval(kConcurrencyScript, head + tail, 2 + 7, call.deadline, std::move(on_reply),
                      std::move(late));
    return;
  }
  const uint32_t tag = BatchTag(call.key);
  connection_->Call({.script = kConcurrencyScript,
                     .function = kConcurrencyFunction,
                     .key = std::move(call.key),
                     .args = std::move(tail),
                     .arg_items = batch_manifest::kArity[kConcurrencyFunction],
                     .batch_tag = tag},
                    call.deadline, std::move(on_reply), std::move(late));
}

void RedisStore::AppendToStream(std::string key,
                                std::vector<std::pair<std::string, std::string>> fields,
                                int64_t max_len, int64_t retention_ms, Deadline deadline,
                                std::function<void(Status)> done) {
  std::string tail;
  AppendBulk(tail, "1");
  AppendBulk(tail, key);
  AppendBulk(tail, static_cast<int64_t>(5));
  AppendBulk(tail, "");
  AppendBulk(tail, max_len);
  AppendBulk(tail, retention_ms);
  for (const auto& [field, value] : fields) {
    AppendBulk(tail, field);
    AppendBulk(tail, value);
  }
  const int items = 6 + 2 * static_cast<int>(fields.size());
  connection_->Eval(
      kConcurrencyScript, std::move(tail), items, deadline,
      [done = std::move(done)](const Status& status, const redisReply*) { done(status); });
}

void RedisStore::AssignQuota(QuotaCall call, QuotaCallback done) {
  // src/algo/quota_shares.lua: KEYS[1..2], then op, now, client, demand, rate, hold,
  // headroom, budget.
  const QuotaShareArgs& a = call.args;
  std::string tail;
  tail.reserve(128 + 2 * call.key.size() + a.client.size());
  AppendBulk(tail, "2");
  AppendBulk(tail, call.key);
  AppendBulk(tail, call.index_key);
  AppendBulk(tail, a.release ? "1" : "0");
  if (call.now_ms) {
    AppendBulk(tail, *call.now_ms);
  } else {
    AppendBulk(tail, "");
  }
  AppendBulk(tail, a.client);
  AppendBulk(tail, a.demand_milli);
  AppendBulk(tail, a.rate_milli);
  AppendBulk(tail, a.hold_ms);
  AppendBulk(tail, a.headroom_percent);
  AppendBulk(tail, a.budget_bytes);
  connection_->Eval(kQuotaSharesScript, std::move(tail), 11, call.deadline,
                    [done = std::move(done)](const Status& status, const redisReply* reply) {
                      if (!status.ok()) {
                        done(status);
                        return;
                      }
                      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5) {
                        done(InternalError("the quota script returned an unexpected reply"));
                        return;
                      }
                      for (size_t i = 0; i < 5; ++i) {
                        if (!IsInteger(reply->element[i])) {
                          done(InternalError("the quota script returned a non-integer field"));
                          return;
                        }
                      }
                      done(QuotaShareReply{reply->element[0]->integer, reply->element[1]->integer,
                                           reply->element[2]->integer, reply->element[3]->integer,
                                           reply->element[4]->integer != 0});
                    });
}

Status RedisStore::connection_error() const {
  if (connection_->ready()) return Status::Ok();
  Status why = connection_->last_error();
  if (why.ok())
    why = UnavailableError("redis " + connection_->endpoint().Describe() + ": connecting");
  return why;
}

void RedisStore::Shutdown() {
  std::shared_ptr<Subscriber> subscriber;
  {
    MutexLock lock(subscriber_mu_);
    shut_down_ = true;
    subscriber = std::move(subscriber_);
  }
  if (subscriber) subscriber->Shutdown();
  connection_->Shutdown();
}

void RedisStore::Info(std::string_view section, Deadline deadline,
                      std::function<void(StatusOr<std::string>)> done) {
  connection_->Send(FormatCommand({"INFO", section}), deadline,
                    [done = std::move(done)](const Status& status, const redisReply* reply) {
                      if (!status.ok()) {
                        done(status);
                      } else if (reply->type != REDIS_REPLY_STRING) {
                        done(InternalError("INFO returned an unexpected reply"));
                      } else {
                        done(std::string(reply->str, reply->len));
                      }
                    });
}

ClientStats RedisStore::stats() const {
  Connection::Stats s = connection_->stats();
  return {s.commands, s.writes, s.deadline_exceeded, s.reconnects, s.noscript_retries};
}

}  // namespace sluice::internal
