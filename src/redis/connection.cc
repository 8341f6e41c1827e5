#include "redis/connection.h"

#include <algorithm>
#include <random>
#include <type_traits>

#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include "core/client_side.h"
#include "redis/batch_codec.h"
#include "redis/resp.h"
#include "redis/sentinel.h"
#include "redis/tls.h"

namespace sluice::internal {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

struct Connection::Session {
  explicit Session(const asio::strand<asio::any_io_executor>& strand)
      : socket(strand), resolver(strand), reader(redisReaderCreate()) {}
  ~Session() { redisReaderFree(reader); }

  asio::generic::stream_protocol::socket socket;
  asio::ip::tcp::resolver resolver;
  // rediss://: the TLS stream over `socket` (made once TCP is connected).
  std::unique_ptr<asio::ssl::stream<asio::generic::stream_protocol::socket&>> tls;
  bool tls_handshaking = false;  // strand only
  HostPort address;              // where this connection attempt goes (TCP only; strand only)
  bool demoted = false;          // a READONLY reply: the server is no longer a primary
  bool handshaken = false;       // the handshake succeeded (strand only)
  redisReader* reader;
  std::string writing;  // the batch being written
  std::vector<char> read_buf = std::vector<char>(64 * 1024);
  std::vector<redisReply*> replies;  // scratch, reused per read
  std::vector<Request> batch;        // scratch, reused per read
  std::vector<size_t> groups;        // scratch: per reply, how many requests it answers
  bool connected = false;            // strand only
  bool closed = false;               // strand only

  // Reads and writes go through TLS when the session has it.
  template <typename Buffers, typename Handler>
  void AsyncWrite(const Buffers& buffers, Handler&& handler) {
    if (tls) {
      asio::async_write(*tls, buffers, std::forward<Handler>(handler));
    } else {
      asio::async_write(socket, buffers, std::forward<Handler>(handler));
    }
  }
  template <typename Buffers, typename Handler>
  void AsyncReadSome(const Buffers& buffers, Handler&& handler) {
    if (tls) {
      tls->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      socket.async_read_some(buffers, std::forward<Handler>(handler));
    }
  }
};

namespace {

// Callbacks run between flushes of what they issued (see OnReplies).
constexpr size_t kFlushEvery = 16;
int64_t Ms(steady_clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

// Parses "redis_version:7.0.15" out of INFO server; 0 when absent.
int MajorVersion(std::string_view info) {
  constexpr std::string_view kKey = "redis_version:";
  auto at = info.find(kKey);
  if (at == std::string_view::npos) return 0;
  int major = 0;
  for (size_t i = at + kKey.size(); i < info.size() && info[i] >= '0' && info[i] <= '9'; ++i) {
    major = major * 10 + (info[i] - '0');
  }
  return major;
}

}  // namespace

std::shared_ptr<Connection> Connection::Make(asio::any_io_executor executor, Endpoint endpoint,
                                             ConnectionOptions options) {
  std::shared_ptr<SentinelLocator> sentinel;
  if (endpoint.kind == Endpoint::Kind::kSentinel && !options.locate) {
    sentinel = SentinelLocator::Make(executor, endpoint, options);
    options.locate = [sentinel](Deadline deadline, std::function<void(StatusOr<HostPort>)> done) {
      sentinel->Locate(deadline, std::move(done));
    };
  }
  std::shared_ptr<Connection> connection(
      new Connection(std::move(executor), std::move(endpoint), std::move(options)));
  if (sentinel) {
    // Before Start: the locator follows +switch-master only once started.
    sentinel->Follow(connection);
    connection->sentinel_ = std::move(sentinel);
  }
  return connection;
}

Connection::Connection(asio::any_io_executor executor, Endpoint endpoint, ConnectionOptions options)
    : strand_(asio::make_strand(executor)),
      endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      shas_(options_.scripts.size()),
      timer_(strand_),
      retry_timer_(strand_),
      backoff_(options_.reconnect_min_backoff) {
  if (endpoint_.tls.enabled) {
    auto context = MakeTlsContext(endpoint_.tls);
    if (context.ok()) {
      tls_context_ = *std::move(context);
    } else {
      tls_error_ = context.status();
    }
  }
}

Connection::~Connection() = default;

void Connection::Start(std::function<void(Status)> first_result) {
  if (sentinel_) sentinel_->Start();
  asio::post(strand_,
             [self = shared_from_this(), first_result = std::move(first_result)]() mutable {
               self->first_result_ = std::move(first_result);
               self->Connect();
             });
}

void Connection::Connect() {
  auto session = std::make_shared<Session>(strand_);
  {
    MutexLock lock(mu_);
    if (state_ == State::kShutdown) return;
    state_ = State::kConnecting;
    session_ = session;
  }
  auto self = shared_from_this();
  retry_timer_.expires_after(options_.connect_timeout);
  retry_timer_.async_wait(
      asio::bind_executor(strand_, [self, session](boost::system::error_code ec) {
        if (ec || session->connected || session->closed) return;
        const std::string limit = std::to_string(self->options_.connect_timeout.count()) + " ms";
        self->Break(session, DeadlineExceededError(
                                 session->tls_handshaking
                                     ? "the TLS handshake with redis " + self->Where(*session) +
                                           " did not finish within " + limit +
                                           " (is it a TLS port? rediss:// needs redis's tls-port)"
                                     : "connecting to redis " + self->Where(*session) +
                                           " took longer than " + limit));
      }));
  if (!tls_error_.ok()) {
    Break(session, tls_error_);
    return;
  }
  if (endpoint_.kind == Endpoint::Kind::kUnix) {
    asio::generic::stream_protocol::endpoint ep{
        asio::local::stream_protocol::endpoint(endpoint_.path)};
    session->socket.async_connect(
        ep, asio::bind_executor(strand_, [self, session](boost::system::error_code ec) {
          self->OnSocketConnected(session, ec);
        }));
    return;
  }
  if (options_.locate) {
    options_.locate(steady_clock::now() + options_.connect_timeout,
                    [self, session](StatusOr<HostPort> address) {
                      asio::post(self->strand_, [self, session, address = std::move(address)] {
                        if (session->closed) return;
                        if (!address.ok()) {
                          self->Break(session, address.status());
                          return;
                        }
                        self->ConnectTcp(session, *address);
                      });
                    });
    return;
  }
  ConnectTcp(session, HostPort{endpoint_.host, endpoint_.port});
}

std::string Connection::Where(const Session& session) const {
  if (endpoint_.kind != Endpoint::Kind::kSentinel) return endpoint_.Describe();
  if (session.address.host.empty()) return endpoint_.Describe();
  return session.address.Describe() + " (" + endpoint_.Describe() + ")";
}

void Connection::ConnectTcp(const std::shared_ptr<Session>& session, HostPort address) {
  session->address = std::move(address);
  auto self = shared_from_this();
  auto on_connect = [self, session](boost::system::error_code ec) {
    self->OnSocketConnected(session, ec);
  };
  session->resolver.async_resolve(
      session->address.host, std::to_string(session->address.port),
      asio::bind_executor(
          strand_, [self, session, on_connect](boost::system::error_code ec,
                                               asio::ip::tcp::resolver::results_type results) {
            if (session->closed) return;
            if (ec || results.empty()) {
              self->Break(session, UnavailableError("cannot resolve redis host \"" +
                                                    session->address.host + "\": " + ec.message()));
              return;
            }
            asio::generic::stream_protocol::endpoint ep{results.begin()->endpoint()};
            session->socket.async_connect(ep, asio::bind_executor(self->strand_, on_connect));
          }));
}

void Connection::OnSocketConnected(const std::shared_ptr<Session>& session,
                                   boost::system::error_code ec) {
  if (session->closed) return;
  if (ec) {
    Break(session,
          UnavailableError("cannot connect to redis " + Where(*session) + ": " + ec.message()));
    return;
  }
  if (endpoint_.kind != Endpoint::Kind::kUnix) {
    boost::system::error_code ignored;
    session->socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    if (tls_context_) {
      StartTls(session);
      return;
    }
  }
  OnConnected(session);
}

void Connection::StartTls(const std::shared_ptr<Session>& session) {
  session->tls = std::make_unique<asio::ssl::stream<asio::generic::stream_protocol::socket&>>(
      session->socket, *tls_context_);
  const std::string name = TlsNameFor(endpoint_.tls, session->address.host);
  if (Status s = PrepareTlsSession(session->tls->native_handle(), name); !s.ok()) {
    Break(session, std::move(s));
    return;
  }
  session->tls_handshaking = true;
  session->tls->async_handshake(
      asio::ssl::stream_base::client,
      asio::bind_executor(strand_, [self = shared_from_this(), session,
                                    name](boost::system::error_code ec) {
        if (session->closed) return;
        session->tls_handshaking = false;
        if (ec) {
          self->Break(session, TlsHandshakeError(session->tls->native_handle(), ec,
                                                 self->endpoint_.tls, self->Where(*session), name));
          return;
        }
        self->OnConnected(session);
      }));
}

void Connection::OnConnected(const std::shared_ptr<Session>& session) {
  session->connected = true;
  retry_timer_.cancel();
  {
    MutexLock lock(mu_);
    if (session_ != session) return;
    state_ = State::kHandshaking;
  }
  StartRead(session);
  Handshake(session);
}

// One handshake: where it goes, the commands its steps issued and not yet answered, and
// the first failure. The last reply to come ends it (HandshakeDone).
struct Connection::Handshaking {
  std::shared_ptr<Session> session;
  Deadline deadline;
  std::string where;
  int pending = 0;
  Status status;
};

void Connection::Handshake(const std::shared_ptr<Session>& session) {
  auto handshake = std::make_shared<Handshaking>();
  handshake->session = session;
  handshake->deadline = steady_clock::now() + options_.connect_timeout;
  handshake->where = Where(*session);
  if (!endpoint_.password.empty()) HandshakeAuth(handshake);
  if (endpoint_.db != 0) HandshakeSelect(handshake);
  HandshakeCheckVersion(handshake);  // then the scripts
  if (endpoint_.kind == Endpoint::Kind::kSentinel) HandshakeCheckRole(handshake);
  if (!options_.subscribe.empty()) HandshakeSubscribe(handshake);
}

void Connection::HandshakeIssue(const std::shared_ptr<Handshaking>& handshake, std::string command,
                                HandshakeCheck check) {
  // Counted before the command is queued: a reply cannot finish the handshake early.
  ++handshake->pending;
  Request request;
  request.deadline = handshake->deadline;
  request.issued = steady_clock::now();
  request.done = [self = shared_from_this(), handshake, check = std::move(check)](
                     const Status& status, const redisReply* reply) {
    Status result = status.ok() ? check(reply) : status;
    if (!result.ok() && handshake->status.ok()) handshake->status = std::move(result);
    if (--handshake->pending == 0) self->HandshakeDone(handshake->session, handshake->status);
  };
  Enqueue(
      std::move(request), [&](std::string& out, const Request&) { out += command; },
      /*handshake=*/true);
}

void Connection::HandshakeAuth(const std::shared_ptr<Handshaking>& handshake) {
  HandshakeIssue(handshake,
                 endpoint_.user.empty()
                     ? FormatCommand({"AUTH", endpoint_.password})
                     : FormatCommand({"AUTH", endpoint_.user, endpoint_.password}),
                 [](const redisReply*) { return Status::Ok(); });
}

void Connection::HandshakeSelect(const std::shared_ptr<Handshaking>& handshake) {
  HandshakeIssue(handshake, FormatCommand({"SELECT", std::to_string(endpoint_.db)}),
                 [](const redisReply*) { return Status::Ok(); });
}

void Connection::HandshakeCheckVersion(const std::shared_ptr<Handshaking>& handshake) {
  // The scripts are loaded once INFO answered (so the client is authenticated): Redis
  // disconnects an unauthenticated client that sends a large bulk (the batch script)
  // before it could read the NOAUTH or WRONGPASS error. INFO's own step is still pending
  // while its check issues the loads: they are counted before the handshake can finish.
  HandshakeIssue(
      handshake, FormatCommand({"INFO", "server"}),
      [self = shared_from_this(), handshake](const redisReply* reply) {
        if (reply->type != REDIS_REPLY_STRING) {
          return InternalError("redis " + handshake->where + ": unexpected reply to INFO server");
        }
        int major = MajorVersion(std::string_view(reply->str, reply->len));
        if (self->options_.require_redis_7 && major < 7) {
          return FailedPreconditionError("redis " + handshake->where + " is version " +
                                         std::to_string(major) +
                                         ".x; sluice needs Redis >= 7.0 (EXPIRE ... NX)");
        }
        self->HandshakeLoadScripts(handshake);
        return Status::Ok();
      });
}

void Connection::HandshakeLoadScripts(const std::shared_ptr<Handshaking>& handshake) {
  for (size_t i = 0; i < options_.scripts.size(); ++i) {
    HandshakeIssue(handshake, FormatCommand({"SCRIPT", "LOAD", options_.scripts[i].source}),
                   [self = shared_from_this(), handshake, i](const redisReply* reply) {
                     if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
                       return InternalError("redis " + handshake->where +
                                            ": unexpected reply to SCRIPT LOAD of " +
                                            std::string(self->options_.scripts[i].name));
                     }
                     self->shas_[i].assign(reply->str, reply->len);
                     return Status::Ok();
                   });
  }
}

void Connection::HandshakeCheckRole(const std::shared_ptr<Handshaking>& handshake) {
  // The sentinels' answer may be stale (a failover under way): only a primary serves.
  HandshakeIssue(
      handshake, FormatCommand({"ROLE"}),
      [self = shared_from_this(), handshake](const redisReply* reply) {
        const std::string& where = handshake->where;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0 ||
            reply->element[0]->type != REDIS_REPLY_STRING) {
          return InternalError("redis " + where + ": unexpected reply to ROLE");
        }
        std::string_view role(reply->element[0]->str, reply->element[0]->len);
        if (role != "master") {
          if (self->sentinel_) self->sentinel_->NotPrimary(handshake->session->address);
          return UnavailableError("redis " + where + " is a " + std::string(role) +
                                  ", not the primary (a failover is under way or the sentinel's "
                                  "answer was stale); asking the sentinels again");
        }
        return Status::Ok();
      });
}

void Connection::HandshakeSubscribe(const std::shared_ptr<Handshaking>& handshake) {
  HandshakeIssue(
      handshake, FormatCommand({"SUBSCRIBE", options_.subscribe}),
      [handshake](const redisReply* reply) {
        if (reply->type != REDIS_REPLY_ARRAY) {
          return InternalError("redis " + handshake->where + ": unexpected reply to SUBSCRIBE");
        }
        return Status::Ok();
      });
}

void Connection::HandshakeDone(const std::shared_ptr<Session>& session, Status status) {
  if (!status.ok()) {
    Break(session, std::move(status));
    return;
  }
  {
    MutexLock lock(mu_);
    if (session_ != session || state_ != State::kHandshaking) return;
    state_ = State::kReady;
    last_error_ = Status::Ok();
  }
  session->handshaken = true;
  ready_.store(true, std::memory_order_relaxed);
  backoff_ = options_.reconnect_min_backoff;
  if (first_result_) std::exchange(first_result_, nullptr)(Status::Ok());
}

template <typename WriteFn>
void Connection::Enqueue(Request request, WriteFn&& write, bool handshake) {
  constexpr bool kJoin = std::is_same_v<std::decay_t<WriteFn>, JoinBatch>;
  bool post_write = false, post_timer = false;
  Status fail;
  std::shared_ptr<Session> session;
  {
    MutexLock lock(mu_);
    if (!(state_ == State::kReady || (handshake && state_ == State::kHandshaking))) {
      fail =
          UnavailableError("redis " + endpoint_.Describe() + " is not connected" +
                           (last_error_.ok() ? std::string() : " (" + last_error_.message() + ")"));
    } else if (!handshake && queue_.size() >= options_.max_in_flight) {
      std::string what = "redis " + endpoint_.Describe() + ": " + std::to_string(queue_.size()) +
                         " calls already in flight";
      fail = ClientSideError(StatusCode::kUnavailable, std::move(what));
    } else {
      if constexpr (kJoin) {
        (void)write;
        if (open_count_ >= std::min(options_.max_batch, kMaxBatchCalls) ||
            (open_count_ > 0 && queue_.back().batch_tag != request.batch_tag)) {
          CloseBatchLocked();
        }
      } else {
        CloseBatchLocked();
        if (options_.asking && !handshake) {
          // Its own request (no callback), so that replies still match requests in order.
          out_ += "*1\r\n$6\r\nASKING\r\n";
          Request asking;
          asking.deadline = request.deadline;
          asking.issued = request.issued;
          queue_.push_back(std::move(asking));
          ++stats_.commands;
        }
        write(out_, request);
      }
      if (!timer_armed_ || request.deadline < armed_at_) {
        timer_armed_ = true;
        armed_at_ = request.deadline;
        post_timer = true;
      }
      request.written = {};  // a call sent again (NOSCRIPT) is written anew
      request.reply_reads_at_queue = reply_reads_;
      queue_.push_back(std::move(request));
      if constexpr (kJoin) ++open_count_;
      ++stats_.commands;
      if (!write_in_flight_ && !write_posted_) {
        write_posted_ = true;
        post_write = true;
        session = session_;
      }
    }
  }
  auto self = shared_from_this();
  if (!fail.ok()) {
    // Never inline: a caller that retries from its callback must not recurse.
    asio::post(strand_,
               [done = std::move(request.done), fail = std::move(fail)] { done(fail, nullptr); });
    return;
  }
  if (post_write) asio::post(strand_, [self, session] { self->StartWrite(session); });
  if (post_timer) asio::post(strand_, [self] { self->OnTimer(); });
}

void Connection::Send(std::string_view command, Deadline deadline, Callback done) {
  Request request;
  request.done = std::move(done);
  request.deadline = deadline;
  request.issued = steady_clock::now();
  Enqueue(
      std::move(request), [command](std::string& out, const Request&) { out.append(command); },
      false);
}

void Connection::Eval(int script, std::string tail, int tail_items, Deadline deadline,
                      Callback done, Callback late) {
  Request request;
  request.done = std::move(done);
  request.late = std::move(late);
  request.deadline = deadline;
  request.issued = steady_clock::now();
  request.script = script;
  request.tail_items = tail_items;
  request.tail = std::move(tail);
  // shas_ is written by the handshake on the strand before the state becomes ready, and
  // read here only when ready (under mu_, which the handshake's state change also took).
  Enqueue(
      std::move(request),
      [this, script](std::string& out, const Request& r) {
        AppendArray(out, 2 + static_cast<uint64_t>(r.tail_items));
        AppendScriptHead(out, static_cast<size_t>(script), /*eval=*/false);
        out += r.tail;
      },
      false);
}

void Connection::Call(BatchableCall call, Deadline deadline, Callback done, Callback late) {
  Request request;
  request.done = std::move(done);
  request.late = std::move(late);
  request.deadline = deadline;
  request.issued = steady_clock::now();
  request.script = call.script;
  request.command = call.command;
  request.function = call.function;
  request.key = std::move(call.key);
  request.tail = std::move(call.args);
  request.tail_items = call.arg_items;
  request.batch_tag = call.batch_tag;
  if (options_.batch_script < 0 || options_.max_batch <= 1 || options_.asking) {
    Enqueue(
        std::move(request),
        [this](std::string& out, const Request& r) { WriteAlone(out, r, /*eval=*/false); }, false);
    return;
  }
  Enqueue(std::move(request), JoinBatch{}, false);
}

void Connection::EnqueueBatchAgain(std::vector<Request> calls) {
  Status fail;
  bool post_write = false, post_timer = false;
  std::shared_ptr<Session> session;
  {
    MutexLock lock(mu_);
    if (state_ != State::kReady) {
      fail = UnavailableError("redis " + endpoint_.Describe() + " is not connected");
    } else {
      CloseBatchLocked();
      std::vector<Request*> pointers;
      pointers.reserve(calls.size());
      for (Request& r : calls) {
        r.retried = true;
        r.written = {};
        r.reply_reads_at_queue = reply_reads_;
        pointers.push_back(&r);
      }
      WriteBatch(out_, pointers.data(), pointers.size(), /*eval=*/true);
      calls.front().batch = calls.size();
      for (Request& r : calls) {
        if (!timer_armed_ || r.deadline < armed_at_) {
          timer_armed_ = true;
          armed_at_ = r.deadline;
          post_timer = true;
        }
        queue_.push_back(std::move(r));
      }
      ++stats_.commands;
      if (!write_in_flight_ && !write_posted_) {
        write_posted_ = true;
        post_write = true;
        session = session_;
      }
    }
  }
  if (!fail.ok()) {
    for (Request& r : calls) {
      if (r.done) r.done(fail, nullptr);
    }
    return;
  }
  if (post_write) {
    asio::post(strand_, [self = shared_from_this(), session] { self->StartWrite(session); });
  }
  if (post_timer) asio::post(strand_, [self = shared_from_this()] { self->OnTimer(); });
}

void Connection::CloseBatchLocked() {
  if (open_count_ == 0) return;
  const size_t first = queue_.size() - open_count_;
  if (open_count_ == 1) {
    WriteAlone(out_, queue_[first], /*eval=*/false);
  } else {
    Request* pointers[kMaxBatchCalls];
    const size_t n = open_count_;
    for (size_t i = 0; i < n; ++i) pointers[i] = &queue_[first + i];
    stats_.shared_arguments += WriteBatch(out_, pointers, n, /*eval=*/false);
    queue_[first].batch = n;
    ++stats_.batches;
    stats_.batched_calls += n;
  }
  open_count_ = 0;
}

void Connection::WriteAlone(std::string& out, const Request& r, bool eval) const {
  if (r.script < 0) {
    AppendArray(out, 2 + static_cast<uint64_t>(r.tail_items));
    AppendBulk(out, r.command);
    AppendBulk(out, r.key);
    out += r.tail;
    return;
  }
  AppendArray(out, 4 + static_cast<uint64_t>(r.tail_items));
  AppendScriptHead(out, static_cast<size_t>(r.script), eval);
  AppendBulk(out, "1");
  AppendBulk(out, r.key);
  out += r.tail;
}

void Connection::AppendScriptHead(std::string& out, size_t script, bool eval) const {
  if (eval) {
    AppendBulk(out, "EVAL");
    AppendBulk(out, options_.scripts[script].source);
  } else {
    AppendBulk(out, "EVALSHA");
    AppendBulk(out, shas_[script]);
  }
}

size_t Connection::WriteBatch(std::string& out, Request* const* calls, size_t n, bool eval) const {
  // EVALSHA <batch> n key_1 .. key_n, then per call its function and its arguments (or
  // what it reuses: redis/batch_codec.h); or, for calls tagged kAnySlot, EVALSHA <batch>
  // 0 n key_1 .. key_n … (keys undeclared).
  BatchCall batch[kMaxBatchCalls];
  for (size_t i = 0; i < n; ++i) {
    const Request& r = *calls[i];
    batch[i] = {.function = r.function, .key = r.key, .args = r.tail, .arg_items = r.tail_items};
  }
  const size_t shared = PlanArgumentReuse(batch, n);
  const bool undeclared = calls[0]->batch_tag == kAnySlot;
  AppendArray(out, BatchItems(batch, n, undeclared));
  AppendScriptHead(out, static_cast<size_t>(options_.batch_script), eval);
  AppendBatchArguments(out, batch, n, undeclared);
  return shared;
}

void Connection::StartWrite(const std::shared_ptr<Session>& session) {
  {
    MutexLock lock(mu_);
    if (!session || session->closed || session_ != session) return;
    write_posted_ = false;
    if (write_in_flight_ || corked_) return;
    CloseBatchLocked();
    if (out_.empty()) return;
    // Every request not written yet is in out_ (the open batch was just closed into it),
    // and those are the last ones queued.
    const auto now = steady_clock::now();
    for (auto r = queue_.rbegin(); r != queue_.rend() && r->written == steady_clock::time_point();
         ++r) {
      r->written = now;
    }
    write_started_at_ = now;
    write_in_flight_ = true;
    session->writing.clear();
    std::swap(session->writing, out_);
    ++stats_.writes;
  }
  auto self = shared_from_this();
  session->AsyncWrite(
      asio::buffer(session->writing),
      asio::bind_executor(strand_, [self, session](boost::system::error_code ec, size_t) {
        if (session->closed) return;
        {
          MutexLock lock(self->mu_);
          self->write_in_flight_ = false;
        }
        if (ec) {
          self->Break(session, UnavailableError("writing to redis " + self->endpoint_.Describe() +
                                                " failed: " + ec.message()));
          return;
        }
        self->StartWrite(session);
      }));
}

std::string Connection::LostHint(const Session& session, boost::system::error_code ec) const {
  if (session.handshaken) return "";
  if (!session.tls) {
    // A TLS port closes on the plaintext it cannot read as a TLS hello.
    return " (during the handshake: if that port serves TLS only, use rediss://)";
  }
  if (ec.category() == asio::error::get_ssl_category()) {
    // An alert after the handshake: the server checked this client's certificate.
    return " (the server refused this client's certificate or its absence: give cert= and "
           "key= of a certificate signed by a CA the server trusts)";
  }
  return "";
}

void Connection::StartRead(const std::shared_ptr<Session>& session) {
  auto self = shared_from_this();
  session->AsyncReadSome(
      asio::buffer(session->read_buf),
      asio::bind_executor(strand_, [self, session](boost::system::error_code ec, size_t n) {
        if (session->closed) return;
        if (ec) {
          self->Break(session,
                      UnavailableError("connection to redis " + self->Where(*session) +
                                       " lost: " + ec.message() + self->LostHint(*session, ec)));
          return;
        }
        redisReaderFeed(session->reader, session->read_buf.data(), n);
        session->replies.clear();
        for (;;) {
          void* reply = nullptr;
          if (redisReaderGetReply(session->reader, &reply) != REDIS_OK) {
            for (redisReply* r : session->replies) freeReplyObject(r);
            session->replies.clear();
            self->Break(session,
                        InternalError("protocol error from redis " + self->endpoint_.Describe() +
                                      ": " + session->reader->errstr));
            return;
          }
          if (reply == nullptr) break;
          session->replies.push_back(static_cast<redisReply*>(reply));
        }
        if (!session->replies.empty()) self->OnReplies(session, session->replies);
        if (!session->closed) self->StartRead(session);
      }));
}

void Connection::OnReplies(const std::shared_ptr<Session>& session,
                           std::vector<redisReply*>& replies) {
  std::vector<Request>& batch = session->batch;
  std::vector<size_t>& groups = session->groups;
  batch.clear();
  groups.clear();
  bool desync = false;
  {
    MutexLock lock(mu_);
    ++reply_reads_;
    // Written requests only: the open batch at the back has not been sent.
    size_t written = queue_.size() - open_count_;
    for (size_t i = 0; i < replies.size() && !desync; ++i) {
      const size_t n = written == 0 ? 0 : queue_.front().batch;
      if (n == 0 && options_.on_push) {  // a message on a subscribed connection
        groups.push_back(0);
        continue;
      }
      if (n == 0 || n > written) {
        desync = true;
        break;
      }
      for (size_t k = 0; k < n; ++k) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      written -= n;
      groups.push_back(n);
    }
  }
  if (desync) {
    for (redisReply* r : replies) freeReplyObject(r);
    // What was taken off the queue is failed by Break with the rest.
    for (Request& r : batch) {
      if (r.done)
        r.done(UnavailableError("redis " + endpoint_.Describe() + " desynchronised"), nullptr);
    }
    batch.clear();
    Break(session,
          InternalError("redis " + endpoint_.Describe() + " sent a reply nobody asked for"));
    return;
  }
  size_t at = 0, callbacks = 0;
  for (size_t i = 0; i < replies.size(); ++i) {
    // Hand what the callbacks issued so far to the socket now instead of after the whole
    // batch: Redis works on it while this thread runs the remaining callbacks, instead of
    // both sides taking turns.
    const size_t n = groups[i];
    if (callbacks >= kFlushEvery) {
      StartWrite(session);
      callbacks = 0;
    }
    callbacks += n;
    if (endpoint_.kind == Endpoint::Kind::kSentinel && replies[i]->type == REDIS_REPLY_ERROR &&
        IsReadOnlyError(std::string_view(replies[i]->str, replies[i]->len))) {
      session->demoted = true;
    }
    if (n == 0) {
      options_.on_push(replies[i]);
    } else if (n == 1) {
      Dispatch(batch[at], replies[i]);
    } else if (DispatchBatch(&batch[at], n, replies[i]) &&
               endpoint_.kind == Endpoint::Kind::kSentinel) {
      // A call of the batch answered READONLY: as for a reply alone.
      session->demoted = true;
    }
    freeReplyObject(replies[i]);
    at += n;
  }
  batch.clear();
  if (session->demoted) {
    // The primary was demoted (a failover this client missed): ask the sentinels again.
    Break(session, UnavailableError("redis " + Where(*session) +
                                    " answered READONLY: it is no longer the primary; asking "
                                    "the sentinels again"));
  }
}

void Connection::Dispatch(Request& request, redisReply* reply) {
  if (request.done) {
    if (reply->type == REDIS_REPLY_ERROR) {
      std::string_view error(reply->str, reply->len);
      if (request.script >= 0 && !request.retried && error.starts_with("NOSCRIPT")) {
        // The script cache was flushed: send the same call with the source, which runs
        // it and caches it again. Same deadline, same callback.
        request.retried = true;
        {
          MutexLock lock(mu_);
          ++stats_.noscript_retries;
        }
        if (request.function >= 0) {
          Enqueue(
              std::move(request),
              [this](std::string& out, const Request& r) { WriteAlone(out, r, /*eval=*/true); },
              false);
          return;
        }
        Enqueue(
            std::move(request),
            [this](std::string& out, const Request& r) {
              AppendArray(out, 2 + static_cast<uint64_t>(r.tail_items));
              AppendScriptHead(out, static_cast<size_t>(r.script), /*eval=*/true);
              out += r.tail;
            },
            false);
      } else {
        request.done(ErrorReplyToStatus(error, endpoint_.Describe()), reply);
      }
    } else {
      request.done(Status::Ok(), reply);
    }
  } else if (request.late && reply->type != REDIS_REPLY_ERROR) {
    request.late(Status::Ok(), reply);
  }
}

bool Connection::DispatchBatch(Request* calls, size_t n, redisReply* reply) {
  if (reply->type == REDIS_REPLY_ERROR) {
    std::string_view error(reply->str, reply->len);
    if (!calls[0].retried && error.starts_with("NOSCRIPT")) {
      // As for a call alone: resend the batch with the script's source (which caches it
      // again), the calls whose callers still wait only.
      std::vector<Request> again;
      for (size_t i = 0; i < n; ++i) {
        if (calls[i].done) again.push_back(std::move(calls[i]));
      }
      {
        MutexLock lock(mu_);
        ++stats_.noscript_retries;
      }
      for (Request& r : again) r.batch = 1;
      if (again.size() == 1) {
        again[0].retried = true;
        Enqueue(
            std::move(again[0]),
            [this](std::string& out, const Request& r) { WriteAlone(out, r, /*eval=*/true); },
            false);
      } else if (!again.empty()) {
        EnqueueBatchAgain(std::move(again));
      }
      return false;
    }
    // The whole script failed (e.g. OOM, a script error): every call gets the error.
    const Status status = ErrorReplyToStatus(error, endpoint_.Describe());
    for (size_t i = 0; i < n; ++i) {
      if (calls[i].done) calls[i].done(status, reply);
    }
    return IsReadOnlyError(error);
  }
  // One flat array, read call by call (redis/batch_codec.h); a call's items are handed
  // to it as they are read.
  BatchReplyReader reader(*reply);
  size_t i = 0;
  for (; i < n; ++i) {
    Request& call = calls[i];
    const redisReply* own = reader.Next();
    if (own == nullptr) break;
    if (call.done) {
      if (own->type == REDIS_REPLY_ERROR) {
        call.done(ErrorReplyToStatus(std::string_view(own->str, own->len), endpoint_.Describe()),
                  own);
      } else {
        call.done(Status::Ok(), own);
      }
    } else if (call.late && own->type != REDIS_REPLY_ERROR) {
      call.late(Status::Ok(), own);
    }
  }
  if (i < n || !reader.AtEnd()) {
    // Not the batch script's layout (a script of another version under the same SHA
    // cannot be: the SHA is of the source): the calls not yet answered fail, none is guessed at.
    const Status bad = InternalError("redis " + endpoint_.Describe() +
                                     ": the batch script returned an unexpected reply");
    for (; i < n; ++i) {
      if (calls[i].done) calls[i].done(bad, nullptr);
    }
  }
  return reader.readonly();
}

steady_clock::time_point Connection::SentAtLocked(const Request& r) const {
  if (r.written != steady_clock::time_point()) return r.written;
  return write_in_flight_ ? write_started_at_ : steady_clock::time_point::max();
}

void Connection::OnTimer() {
  const auto now = steady_clock::now();
  struct Expired {
    Callback done;
    int64_t waited_ms;
    bool backlog;     // replies kept arriving while it waited
    int64_t held_ms;  // this process held it that long before writing it; -1: never written
  };
  std::vector<Expired> expired;
  Deadline next = Deadline::max();
  std::shared_ptr<Session> stalled;
  int64_t stalled_ms = 0;
  {
    MutexLock lock(mu_);
    for (Request& r : queue_) {
      if (!r.done) continue;
      if (r.deadline <= now) {
        // Held here for more than half its time: the store had too little of it to be
        // blamed (this process's event loop lagged before the call went out).
        const auto sent = SentAtLocked(r);
        int64_t held_ms = 0;
        if (sent == steady_clock::time_point::max()) {
          held_ms = -1;
        } else if (sent - r.issued > (r.deadline - r.issued) / 2) {
          held_ms = std::max<int64_t>(1, Ms(sent - r.issued));
        }
        expired.push_back({std::move(r.done), Ms(r.deadline - r.issued),
                           reply_reads_ > r.reply_reads_at_queue, held_ms});
        r.done = nullptr;
        ++stats_.deadline_exceeded;
      } else {
        next = std::min(next, r.deadline);
      }
    }
    if (state_ == State::kReady && !queue_.empty()) {
      // Timed-out calls stay queued until their reply arrives (FIFO matching); if the
      // oldest has waited for the store too long, the server or the network is gone. Its
      // wait counts from when it was written: time this process held it is not the
      // store's (a call not written yet, with no write in flight, is not waiting for it).
      const auto sent = SentAtLocked(queue_.front());
      if (sent == steady_clock::time_point::max()) {
        next = std::min(next, now + options_.stall_timeout);
      } else if (sent + options_.stall_timeout > now) {
        next = std::min(next, sent + options_.stall_timeout);
      } else {
        stalled = session_;
        stalled_ms = Ms(now - sent);
      }
    }
    timer_armed_ = next != Deadline::max();
    armed_at_ = next;
  }
  for (Expired& e : expired) {
    std::string message = "redis " + endpoint_.Describe() + " did not answer within " +
                          std::to_string(e.waited_ms) + " ms";
    if (e.held_ms != 0) {
      const std::string cause = e.held_ms < 0
                                    ? "this process never wrote it: its event loop lagged"
                                    : "this process held it " + std::to_string(e.held_ms) +
                                          " ms before writing it: its event loop lagged";
      e.done(ClientSideError(StatusCode::kDeadlineExceeded, std::move(message), cause), nullptr);
    } else {
      e.done(e.backlog ? ClientSideError(StatusCode::kDeadlineExceeded, std::move(message))
                       : DeadlineExceededError(std::move(message)),
             nullptr);
    }
  }
  if (stalled) {
    Break(stalled, UnavailableError("redis " + endpoint_.Describe() + " sent no reply for " +
                                    std::to_string(stalled_ms) + " ms; reconnecting"));
    return;
  }
  if (next != Deadline::max()) {
    timer_.expires_at(next);
    timer_.async_wait(
        asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
          if (!ec) self->OnTimer();
        }));
  }
}

void Connection::Break(const std::shared_ptr<Session>& session, Status why) {
  std::deque<Request> failed;
  bool shutdown = false;
  {
    MutexLock lock(mu_);
    if (session_ != session || session->closed) return;
    session->closed = true;
    failed.swap(queue_);
    open_count_ = 0;
    out_.clear();
    write_posted_ = false;
    write_in_flight_ = false;
    // The queue is empty: no deadline is armed for now. Kept (a stall found while a
    // call's deadline was still ahead leaves them set, with no timer waiting), they
    // would tell Enqueue that a timer is armed, and the calls after the reconnect (the
    // handshake's too) would wait for Redis's reply whatever their deadline, with no
    // stall check either.
    timer_armed_ = false;
    armed_at_ = Deadline::max();
    session_.reset();
    last_error_ = why;
    shutdown = state_ == State::kShutdown;
    if (!shutdown) state_ = State::kDown;
    if (ready_.exchange(false)) ++stats_.reconnects;
  }
  boost::system::error_code ignored;
  session->socket.close(ignored);
  session->resolver.cancel();
  retry_timer_.cancel();
  const Status lost = why.code() == StatusCode::kUnavailable
                          ? why
                          : UnavailableError("connection to redis " + endpoint_.Describe() +
                                             " closed: " + why.message());
  for (Request& r : failed) {
    if (r.done) r.done(lost, nullptr);
  }
  if (first_result_) {
    // Start-up: report the first failure instead of retrying silently.
    std::exchange(first_result_, nullptr)(std::move(why));
    return;
  }
  if (!shutdown) ScheduleReconnect();
}

void Connection::ScheduleReconnect() {
  // Jitter (±25%) keeps a fleet that lost Redis together from reconnecting in lockstep.
  static thread_local std::minstd_rand jitter(std::random_device{}());
  auto delay = backoff_ * (75 + static_cast<int>(jitter() % 51)) / 100;
  backoff_ = std::min(backoff_ * 2, options_.reconnect_max_backoff);
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait(
      asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
        if (!ec) self->Connect();
      }));
}

void Connection::Cork() {
  MutexLock lock(mu_);
  corked_ = true;
}

void Connection::Uncork() {
  std::shared_ptr<Session> session;
  {
    MutexLock lock(mu_);
    corked_ = false;
    session = session_;
  }
  asio::post(strand_, [self = shared_from_this(), session] { self->StartWrite(session); });
}

void Connection::Redirect(HostPort to, std::string why) {
  asio::post(strand_, [self = shared_from_this(), to = std::move(to), why = std::move(why)] {
    std::shared_ptr<Session> session;
    State state;
    {
      MutexLock lock(self->mu_);
      session = self->session_;
      state = self->state_;
    }
    if (state == State::kShutdown) return;
    self->backoff_ = self->options_.reconnect_min_backoff;
    if (session) {
      if (session->address.host == to.host && session->address.port == to.port) return;
      self->Break(session, UnavailableError(why));  // reconnects after the minimum backoff
      return;
    }
    if (state == State::kDown && !self->first_result_) {
      self->retry_timer_.cancel();  // the pending backoff: reconnect now instead
      self->ScheduleReconnect();
    }
  });
}

void Connection::Shutdown() {
  if (sentinel_) sentinel_->Shutdown();
  std::shared_ptr<Session> session;
  {
    MutexLock lock(mu_);
    if (state_ == State::kShutdown) return;
    state_ = State::kShutdown;
    session = session_;
  }
  asio::post(strand_, [self = shared_from_this(), session] {
    if (session) self->Break(session, UnavailableError("the sluice client was shut down"));
    self->retry_timer_.cancel();
    self->timer_.cancel();
    if (self->first_result_) {
      std::exchange(self->first_result_,
                    nullptr)(UnavailableError("the sluice client was shut down"));
    }
  });
}

Status Connection::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

Connection::Stats Connection::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace sluice::internal
