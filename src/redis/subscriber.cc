#include "redis/subscriber.h"

#include <hiredis/hiredis.h>

#include <string_view>
#include <utility>

#include "redis/resp.h"

namespace sluice::internal {

namespace {

// How long a SSUBSCRIBE or SUNSUBSCRIBE may wait for its answer.
constexpr std::chrono::seconds kCommandDeadline{2};

bool Is(const redisReply* r, std::string_view s) {
  return r->type == REDIS_REPLY_STRING && std::string_view(r->str, r->len) == s;
}

}  // namespace

std::shared_ptr<Subscriber> Subscriber::Start(boost::asio::any_io_executor executor,
                                              Endpoint endpoint, ConnectionOptions options) {
  auto self = std::shared_ptr<Subscriber>(new Subscriber(executor));
  std::weak_ptr<Subscriber> weak = self;
  options.scripts.clear();
  options.batch_script = -1;
  options.subscribe.clear();
  options.asking = false;
  options.on_push = [weak](const redisReply* reply) {
    if (auto s = weak.lock()) s->OnReply(reply);
  };
  self->connection_ = Connection::Make(executor, std::move(endpoint), std::move(options));
  self->wakeups_ = std::make_shared<Wakeups>(
      kMaxWatches,
      [weak](const std::string& channel) {
        if (auto s = weak.lock()) s->Send("SSUBSCRIBE", channel);
      },
      [weak](const std::string& channel) {
        if (auto s = weak.lock()) s->Send("SUNSUBSCRIBE", channel);
      });
  self->connection_->Start(nullptr);
  self->CheckReconnect();
  return self;
}

Subscriber::~Subscriber() {
  Shutdown();
}

void Subscriber::Shutdown() {
  if (stopped_.exchange(true)) return;
  {
    MutexLock lock(timer_mu_);
    timer_.cancel();
  }
  if (connection_) connection_->Shutdown();
}

Wakeups::Handle Subscriber::Watch(const std::string& channel, std::function<void()> wake) {
  if (stopped_.load()) return nullptr;
  return wakeups_->Watch(channel, std::move(wake));
}

void Subscriber::Send(std::string_view verb, const std::string& channel) {
  if (!connection_->ready()) return;  // subscribed at the next connect (CheckReconnect)
  std::weak_ptr<Subscriber> weak = weak_from_this();
  connection_->Send(FormatCommand({std::string(verb), channel}),
                    std::chrono::steady_clock::now() + kCommandDeadline,
                    [weak](const Status& status, const redisReply* reply) {
                      // Replies are matched in order: a message that arrived before this
                      // command's answer is handed here, and the answer goes to on_push.
                      if (!status.ok()) return;
                      if (auto s = weak.lock()) s->OnReply(reply);
                    });
}

void Subscriber::OnReply(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) return;
  if (!Is(reply->element[0], "smessage")) return;
  const redisReply* channel = reply->element[1];
  if (channel->type != REDIS_REPLY_STRING) return;
  wakeups_->Notify(std::string_view(channel->str, channel->len));
}

void Subscriber::CheckReconnect() {
  if (stopped_.load()) return;
  // Each (re)connect is a new session with no subscription: subscribe every watched
  // channel again once the connection is ready.
  const uint64_t sessions = connection_->stats().reconnects + (connection_->ready() ? 1 : 0);
  if (connection_->ready() && sessions != sessions_seen_.load()) {
    sessions_seen_.store(sessions);
    for (const std::string& channel : wakeups_->Channels()) Send("SSUBSCRIBE", channel);
  }
  MutexLock lock(timer_mu_);
  if (stopped_.load()) return;  // Shutdown cancelled the timer: arm it no more
  timer_.expires_after(kResubscribeCheck);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto s = weak.lock()) s->CheckReconnect();
  });
}

}  // namespace sluice::internal
