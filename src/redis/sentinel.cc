#include "redis/sentinel.h"

#include <atomic>
#include <charconv>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "redis/resp.h"

namespace sluice::internal {
namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

// How often Locate looks whether the query link came up.
constexpr std::chrono::milliseconds kLinkPoll{5};

std::optional<uint16_t> ParsePort(std::string_view text) {
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || ptr != text.data() + text.size() || port == 0 || port > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(port);
}

// A link's `locate`: the sentinels in turn, one per connect attempt (each link its own
// turn), so a link whose sentinel is down moves on at its next reconnect.
std::function<void(Deadline, std::function<void(StatusOr<HostPort>)>)> InTurn(
    std::vector<HostPort> sentinels) {
  return [sentinels = std::move(sentinels), next = std::make_shared<std::atomic<size_t>>(0)](
             Deadline, std::function<void(StatusOr<HostPort>)> done) {
    done(sentinels[next->fetch_add(1) % sentinels.size()]);
  };
}

}  // namespace

std::optional<SwitchMaster> ParseSwitchMaster(std::string_view message) {
  std::vector<std::string_view> words;
  while (!message.empty()) {
    const size_t space = message.find(' ');
    if (space != 0) words.push_back(message.substr(0, space));
    if (space == std::string_view::npos) break;
    message = message.substr(space + 1);
  }
  if (words.size() != 5) return std::nullopt;
  auto port = ParsePort(words[4]);
  if (!port) return std::nullopt;
  return SwitchMaster{std::string(words[0]), HostPort{std::string(words[3]), *port}};
}

SentinelLocator::SentinelLocator(asio::any_io_executor executor, Endpoint endpoint)
    : executor_(std::move(executor)), endpoint_(std::move(endpoint)) {}

std::shared_ptr<SentinelLocator> SentinelLocator::Make(asio::any_io_executor executor,
                                                       const Endpoint& endpoint,
                                                       const ConnectionOptions& data) {
  std::shared_ptr<SentinelLocator> locator(new SentinelLocator(executor, endpoint));
  // A sentinel link: the sentinel's own credentials, the same TLS options, database 0.
  Endpoint link;
  link.kind = Endpoint::Kind::kTcp;
  link.host = endpoint.sentinels.front().host;
  link.port = endpoint.sentinels.front().port;
  link.user = endpoint.sentinel_user;
  link.password = endpoint.sentinel_password;
  link.tls = endpoint.tls;
  ConnectionOptions options;
  options.connect_timeout = data.connect_timeout;
  options.stall_timeout = data.stall_timeout;
  options.reconnect_min_backoff = data.reconnect_min_backoff;
  options.reconnect_max_backoff = data.reconnect_max_backoff;
  options.locate = InTurn(endpoint.sentinels);
  locator->query_ = Connection::Make(executor, link, options);
  options.subscribe = "+switch-master";
  std::weak_ptr<SentinelLocator> weak = locator;
  options.on_push = [weak](const redisReply* reply) {
    if (auto self = weak.lock()) self->OnMessage(reply);
  };
  options.locate = InTurn(endpoint.sentinels);
  locator->watch_ = Connection::Make(executor, link, options);
  return locator;
}

void SentinelLocator::Follow(const std::shared_ptr<Connection>& data) {
  MutexLock lock(mu_);
  data_ = data;
}

void SentinelLocator::Start() {
  query_->Start(nullptr);
  watch_->Start(nullptr);
}

void SentinelLocator::Shutdown() {
  shutdown_.store(true);
  query_->Shutdown();
  watch_->Shutdown();
}

void SentinelLocator::OnMessage(const redisReply* reply) {
  // ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
      reply->element[2]->type != REDIS_REPLY_STRING) {
    return;
  }
  auto message =
      ParseSwitchMaster(std::string_view(reply->element[2]->str, reply->element[2]->len));
  if (!message || message->name != endpoint_.master_name) return;
  std::shared_ptr<Connection> data;
  {
    MutexLock lock(mu_);
    data = data_.lock();
  }
  if (data) {
    data->Redirect(message->to, "the sentinels moved the primary of \"" + endpoint_.master_name +
                                    "\" to " + message->to.Describe() + " (+switch-master)");
  }
}

void SentinelLocator::Locate(Deadline deadline, std::function<void(StatusOr<HostPort>)> done) {
  if (shutdown_.load()) {
    done(UnavailableError("the sluice client was shut down"));
    return;
  }
  if (query_->ready()) {
    LocateNow(deadline, std::move(done));
    return;
  }
  // The link is (re)connecting, or its sentinel is down and it moves to the next one:
  // wait for it while the deadline leaves room.
  if (steady_clock::now() + kLinkPoll >= deadline) {
    done(UnavailableError("no sentinel answers for the master \"" + endpoint_.master_name + "\" (" +
                          endpoint_.Describe() + ")"));
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(executor_, kLinkPoll);
  timer->async_wait([self = shared_from_this(), timer, deadline,
                     done = std::move(done)](boost::system::error_code) mutable {
    self->Locate(deadline, std::move(done));
  });
}

void SentinelLocator::LocateNow(Deadline deadline, std::function<void(StatusOr<HostPort>)> done) {
  const std::string where = endpoint_.Describe();
  const std::string name = endpoint_.master_name;
  query_->Send(
      FormatCommand({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name}), deadline,
      [done = std::move(done), where, name](const Status& status, const redisReply* reply) {
        if (!status.ok()) {
          done(UnavailableError("asking the sentinels for \"" + name +
                                "\" failed: " + status.message()));
          return;
        }
        if (reply->type == REDIS_REPLY_NIL) {
          done(UnavailableError("the sentinel does not know a master named \"" + name + "\" (" +
                                where + ")"));
          return;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
            reply->element[0]->type != REDIS_REPLY_STRING ||
            reply->element[1]->type != REDIS_REPLY_STRING) {
          done(InternalError("unexpected reply to SENTINEL GET-MASTER-ADDR-BY-NAME from " + where));
          return;
        }
        auto port = ParsePort(std::string_view(reply->element[1]->str, reply->element[1]->len));
        if (!port) {
          done(InternalError("the sentinel named a bad port for \"" + name + "\""));
          return;
        }
        done(HostPort{std::string(reply->element[0]->str, reply->element[0]->len), *port});
      });
}

}  // namespace sluice::internal
