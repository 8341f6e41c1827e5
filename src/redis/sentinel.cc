#include "redis/sentinel.h"

#include <algorithm>
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
// The least time one sentinel gets to answer while others are left to ask.
constexpr std::chrono::milliseconds kMinQueryTime{50};

std::optional<uint16_t> ParsePort(std::string_view text) {
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || ptr != text.data() + text.size() || port == 0 || port > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(port);
}

// The answer to SENTINEL GET-MASTER-ADDR-BY-NAME: the address, or what was wrong with it.
StatusOr<HostPort> ParseMasterAddress(const Status& status, const redisReply* reply,
                                      const std::string& name) {
  if (!status.ok()) return status;
  if (reply->type == REDIS_REPLY_NIL) {
    return UnavailableError("does not know a master named \"" + name + "\"");
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return UnavailableError("answered " +
                            std::string(reply->str, std::min<size_t>(reply->len, 200)));
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
      reply->element[0]->type != REDIS_REPLY_STRING ||
      reply->element[1]->type != REDIS_REPLY_STRING) {
    return InternalError("unexpected reply to SENTINEL GET-MASTER-ADDR-BY-NAME");
  }
  auto port = ParsePort(std::string_view(reply->element[1]->str, reply->element[1]->len));
  if (!port || reply->element[0]->len == 0) {
    return InternalError("named a bad address for \"" + name + "\"");
  }
  return HostPort{std::string(reply->element[0]->str, reply->element[0]->len), *port};
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

// One Locate: the round of sentinels still to ask, and what each said.
struct SentinelLocator::Attempt {
  Deadline deadline;
  std::function<void(StatusOr<HostPort>)> done;
  std::vector<size_t> order;  // this round's
  size_t at = 0;
  std::vector<bool> asked;          // answered (or failed) to this attempt's query
  std::vector<std::string> errors;  // per sentinel, why it named no primary
};

SentinelLocator::SentinelLocator(asio::any_io_executor executor, Endpoint endpoint)
    : executor_(std::move(executor)), endpoint_(std::move(endpoint)) {
  for (size_t i = 0; i < endpoint_.sentinels.size(); ++i) order_.push_back(i);
  unknowing_.assign(endpoint_.sentinels.size(), false);
}

std::shared_ptr<SentinelLocator> SentinelLocator::Make(asio::any_io_executor executor,
                                                       const Endpoint& endpoint,
                                                       const ConnectionOptions& data) {
  std::shared_ptr<SentinelLocator> locator(new SentinelLocator(executor, endpoint));
  // A sentinel link: the sentinel's own credentials, the same TLS options, database 0,
  // any server version.
  Endpoint link;
  link.kind = Endpoint::Kind::kTcp;
  link.user = endpoint.sentinel_user;
  link.password = endpoint.sentinel_password;
  link.tls = endpoint.tls;
  ConnectionOptions options;
  options.connect_timeout = data.connect_timeout;
  options.stall_timeout = data.stall_timeout;
  options.reconnect_min_backoff = data.reconnect_min_backoff;
  options.reconnect_max_backoff = data.reconnect_max_backoff;
  options.require_redis_7 = false;
  for (const HostPort& sentinel : endpoint.sentinels) {
    link.host = sentinel.host;
    link.port = sentinel.port;
    locator->links_.push_back(Connection::Make(executor, link, options));
  }
  link.host = endpoint.sentinels.front().host;
  link.port = endpoint.sentinels.front().port;
  std::weak_ptr<SentinelLocator> weak = locator;
  options.subscribe = "+switch-master";
  options.on_push = [weak](const redisReply* reply) {
    if (auto self = weak.lock()) self->OnMessage(reply);
  };
  // The sentinels in turn from the front one, one per connect attempt, so a link whose
  // sentinel is down moves on at its next reconnect.
  options.locate = [weak, sentinels = endpoint.sentinels](
                       Deadline, std::function<void(StatusOr<HostPort>)> done) {
    auto self = weak.lock();
    if (!self) {
      done(UnavailableError("the sluice client was shut down"));
      return;
    }
    size_t s = 0;
    {
      MutexLock lock(self->mu_);
      const size_t n = self->order_.size();
      // Past the sentinels known not to monitor the master, unless all are.
      for (size_t tried = 0; tried < n; ++tried) {
        s = self->order_[self->watch_turn_++ % n];
        if (!self->unknowing_[s]) break;
      }
      self->watch_at_ = s;
    }
    done(sentinels[s]);
  };
  locator->watch_ = Connection::Make(executor, link, options);
  return locator;
}

void SentinelLocator::Follow(const std::shared_ptr<Connection>& data) {
  MutexLock lock(mu_);
  data_ = data;
}

void SentinelLocator::Start() {
  for (auto& link : links_) link->Start(nullptr);
  watch_->Start(nullptr);
}

void SentinelLocator::Shutdown() {
  shutdown_.store(true);
  for (auto& link : links_) link->Shutdown();
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
  auto attempt = std::make_shared<Attempt>();
  attempt->deadline = deadline;
  attempt->done = std::move(done);
  attempt->asked.assign(links_.size(), false);
  attempt->errors.assign(links_.size(), std::string());
  {
    MutexLock lock(mu_);
    attempt->order = order_;
  }
  Next(attempt);
}

void SentinelLocator::Next(const std::shared_ptr<Attempt>& attempt) {
  if (shutdown_.load()) {
    attempt->done(UnavailableError("the sluice client was shut down"));
    return;
  }
  const std::string& name = endpoint_.master_name;
  while (attempt->at < attempt->order.size()) {
    const size_t s = attempt->order[attempt->at++];
    if (attempt->asked[s]) continue;
    Connection& link = *links_[s];
    if (!link.ready()) {
      // Down, or still connecting: left for the next round while the deadline leaves room.
      const Status why = link.last_error();
      attempt->errors[s] = why.ok() ? "not connected yet" : why.message();
      continue;
    }
    // A share of what is left, so that a sentinel that is alive but silent leaves time
    // for the others.
    size_t unasked = 0;
    for (size_t i = 0; i < links_.size(); ++i) unasked += attempt->asked[i] ? 0 : 1;
    const auto left = attempt->deadline - steady_clock::now();
    const Deadline deadline =
        steady_clock::now() +
        std::max<steady_clock::duration>(left / static_cast<int>(std::max<size_t>(unasked, 1)),
                                         std::min<steady_clock::duration>(left, kMinQueryTime));
    link.Send(FormatCommand({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name}), deadline,
              [self = shared_from_this(), attempt, s, name](const Status& status,
                                                            const redisReply* reply) {
                StatusOr<HostPort> address = ParseMasterAddress(status, reply, name);
                attempt->asked[s] = true;
                if (address.ok()) {
                  self->Answered(s, *address);
                  attempt->done(*std::move(address));
                  return;
                }
                {
                  MutexLock lock(self->mu_);
                  self->unknowing_[s] = status.ok() && reply->type == REDIS_REPLY_NIL;
                }
                attempt->errors[s] = address.status().message();
                self->Next(attempt);
              });
    return;
  }
  // Every sentinel of this round was asked or is not connected. Wait for those that may
  // still come up, while the deadline leaves room.
  bool waiting = false;
  for (size_t s = 0; s < links_.size(); ++s) waiting = waiting || !attempt->asked[s];
  if (waiting && steady_clock::now() + kLinkPoll < attempt->deadline) {
    attempt->at = 0;
    auto timer = std::make_shared<asio::steady_timer>(executor_, kLinkPoll);
    timer->async_wait([self = shared_from_this(), timer, attempt](boost::system::error_code) {
      self->Next(attempt);
    });
    return;
  }
  std::string why =
      "no sentinel names a primary for \"" + name + "\" (" + endpoint_.Describe() + "): ";
  for (size_t s = 0; s < links_.size(); ++s) {
    if (s > 0) why += "; ";
    why += endpoint_.sentinels[s].Describe() + " " +
           (attempt->errors[s].empty() ? "did not answer in time" : attempt->errors[s]);
  }
  attempt->done(UnavailableError(why));
}

void SentinelLocator::Answered(size_t s, const HostPort& address) {
  std::shared_ptr<Connection> redirect;
  {
    MutexLock lock(mu_);
    unknowing_[s] = false;
    order_.erase(std::find(order_.begin(), order_.end(), s));
    order_.insert(order_.begin(), s);
    named_ = address;
    if (unknowing_[watch_at_]) {
      // The subscribed link listens to a sentinel that does not monitor the master: to
      // the one that just named it.
      watch_turn_ = 0;
      redirect = watch_;
    }
  }
  if (redirect) {
    redirect->Redirect(endpoint_.sentinels[s], "the sentinel does not monitor \"" +
                                                   endpoint_.master_name + "\"; following " +
                                                   endpoint_.sentinels[s].Describe() + " instead");
  }
}

void SentinelLocator::NotPrimary(const HostPort& address) {
  MutexLock lock(mu_);
  if (order_.size() < 2 || named_.host != address.host || named_.port != address.port) return;
  std::rotate(order_.begin(), order_.begin() + 1, order_.end());
  named_ = HostPort{};
}

}  // namespace sluice::internal
