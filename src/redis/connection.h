// One multiplexed, automatically pipelined connection to one Redis endpoint.
//
// Any thread may call Send/Eval. Every command issued while a write is in flight joins
// the next write, so many concurrent callers cost few syscalls; replies are matched to
// callers in FIFO order. Every call carries a deadline that a timer enforces even when
// Redis is silent; a call completes exactly once — with its reply, DeadlineExceeded, or
// Unavailable when the connection breaks. A connection whose oldest command has waited
// stall_timeout since it was written is closed; after a break the connection reconnects with
// exponential backoff, authenticates, selects the database and reloads the scripts.
//
// Scripts are loaded at every (re)connect and called by EVALSHA; a NOSCRIPT reply
// (SCRIPT FLUSH) is answered by resending the same call as EVAL, which also reloads the
// script, once and invisibly to the caller.
//
// Batching: calls made with Call (the decisions and lease operations) that queue up while
// a write is in flight, or before the queued write starts, are sent as ONE script call
// (options.batch_script, src/algo/batch.lua) that decides each in order, as if sent one
// by one, with a reply per call. Nothing waits to fill a batch: a batch is what queued
// anyway; a call alone is sent as its own command. A batch holds at most
// options.max_batch calls; any other command (Send, Eval) closes the open batch, so the
// order on the wire is the order of the calls. Each call keeps its own deadline and
// callback (an error for one call fails only that call); a NOSCRIPT reply to a batch
// resends it as EVAL of the batch script. Only calls of one batch_tag share a batch. The
// cluster router (redis/cluster_store.h) keeps one Connection per primary and tags its
// calls kAnySlot: their batches are sent with the keys undeclared (numkeys 0, keys among
// the arguments, src/algo/batch.lua), which a primary runs over keys of any slot it
// serves; a call alone is sent with its key declared, as always. Tagged with a slot
// instead, a batch holds keys of that slot only and declares them. The batch's wire form
// (arguments, reply) is redis/batch_codec.h.
//
// Routing: a command is sent to the Connection its caller chose; the cluster router
// picks the connection per key slot and owns one Connection per primary.
//
// Transports: TCP or a unix socket; rediss:// runs TLS over the TCP socket (redis/tls.h:
// the handshake after connect, inside connect_timeout, failures named by cause). An
// Endpoint of Kind::kSentinel asks the sentinels where the primary is at every connect
// (redis/sentinel.h), checks ROLE in the handshake, breaks on a READONLY reply (alone, or
// to any call of a batch) and is moved by Redirect when the sentinels announce a new
// primary.
//
// Errors on this side of the connection while the store answers (too many calls in
// flight; a deadline missed while replies kept arriving after the call was queued) are
// marked client-side (core/client_side.h): the breaker does not count them.
//
// Thread-safety: thread-safe. Callbacks run on the connection's strand (an I/O thread),
// never inline in Send/Eval (a call that fails before being queued — not connected, too
// many in flight — is completed by a post). Callbacks must not block.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include "core/mutex.h"
#include "redis/endpoint.h"
#include "sluice/status.h"

struct redisReply;

namespace sluice::internal {

using Deadline = std::chrono::steady_clock::time_point;

struct Script {
  std::string_view name;
  std::string_view source;
};

struct ConnectionOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds stall_timeout{1000};
  std::chrono::milliseconds reconnect_min_backoff{10};
  std::chrono::milliseconds reconnect_max_backoff{1000};
  std::size_t max_in_flight = 100000;
  // The script Call batches into (an index into `scripts`); -1: every call is sent alone.
  int batch_script = -1;
  // The most calls one batch holds (1: no batching; at most kMaxBatchCalls).
  std::size_t max_batch = 64;
  // Loaded at every (re)connect; Eval's script index points into this list.
  std::vector<Script> scripts;
  // Where to connect, asked at every (re)connect instead of the endpoint's host and port
  // (the sentinel links take their sentinels in turn); `done` may run on any thread.
  // Empty: the endpoint's address (for an Endpoint::Kind::kSentinel, Make sets this to
  // ask the sentinels: redis/sentinel.h).
  std::function<void(Deadline, std::function<void(StatusOr<HostPort>)>)> locate;
  // Not empty: SUBSCRIBE to this channel at every (re)connect, and hand every message
  // that answers no command to on_push (on the strand). No scripts, no other commands.
  std::string subscribe;
  std::function<void(const redisReply*)> on_push;
  // The handshake refuses a server older than Redis 7.0 (the scripts need EXPIRE ... NX).
  // Off for the sentinel links: they run no script, and a Sentinel 6.2 naming a Redis 7
  // primary is common.
  bool require_redis_7 = true;
  // Redis Cluster's ASKING before every command written after the handshake, its own
  // resends (NOSCRIPT) included, next to it on the wire (the connection that follows ASK
  // redirections: ASKING lets the importing node serve one command). Its reply is skipped.
  bool asking = false;
};

class SentinelLocator;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // On error `reply` is null; on success it is valid only during the call.
  using Callback = std::function<void(const Status&, const redisReply*)>;

  static std::shared_ptr<Connection> Make(boost::asio::any_io_executor executor, Endpoint endpoint,
                                          ConnectionOptions options);
  ~Connection();

  // Connects, authenticates, selects the database, checks the server is Redis >= 7.0
  // (unless options.require_redis_7 is off), loads the scripts. `first_result` gets the outcome of
  // the first attempt; if it fails the connection stays down (Start is for start-up: a clear error
  // beats a silent retry loop). Without `first_result` (null), a failed first attempt is retried
  // with the reconnect backoff like any break. Once up, breaks are repaired by reconnecting in the
  // background.
  void Start(std::function<void(Status)> first_result);

  // Sends one formatted command (FormatCommand).
  void Send(std::string_view command, Deadline deadline, Callback done);

  // EVALSHA of options.scripts[script]. `tail` is the RESP of numkeys, keys and args
  // (tail_items of them), written with AppendBulk. `late` (optional) gets the reply that
  // arrives after `done` was completed by the deadline (the script ran after its caller
  // gave up), so the caller can undo what the script did; it is not called when no reply
  // ever comes (the connection broke first: whether the script ran is then unknown).
  void Eval(int script, std::string tail, int tail_items, Deadline deadline, Callback done,
            Callback late = nullptr);

  // One call that may share a script call with others (see Batching above). Alone it is
  // EVALSHA of scripts[script] with the one key `key` and `args` (RESP bulks written with
  // AppendBulk, arg_items of them), or, when `script` < 0, the plain command
  // `command key args`. In a batch it is function `function` of the batch script, which
  // takes the same key and arguments. `done` and `late` as for Eval, with the call's own
  // reply.
  struct BatchableCall {
    int script = -1;
    std::string_view command;  // script < 0: the command's name (static storage)
    int function = 0;
    std::string key;
    std::string args;
    int arg_items = 0;
    // Only calls of one tag share a batch. kAnySlot: the batch sends its keys undeclared
    // (on a Redis Cluster, a script that declares keys may touch one slot only).
    uint32_t batch_tag = 0;
  };
  static constexpr uint32_t kAnySlot = 0xffffffff;
  // The most calls one batch takes, whatever ConnectionOptions::max_batch says (the batch
  // script's own bound).
  static constexpr std::size_t kMaxBatchCalls = 256;
  void Call(BatchableCall call, Deadline deadline, Callback done, Callback late = nullptr);

  // While corked, nothing is written: calls queue up (and batch) until Uncork. For tests
  // that need batches of a chosen size; deadlines keep running.
  void Cork();
  void Uncork();

  // Closes the connection for good: queued calls complete with Unavailable.
  void Shutdown();

  // The server to use is now `to` (a sentinel announced a new primary): a session with
  // another address is closed (calls in flight fail Unavailable with `why`) and the
  // connection reconnects at once, asking where to connect again.
  void Redirect(HostPort to, std::string why);

  bool ready() const { return ready_.load(std::memory_order_relaxed); }
  // Why the connection last broke (a Session: one connection's life) or failed to connect; Ok
  // when none did or the connection is up again.
  Status last_error() const;
  const Endpoint& endpoint() const { return endpoint_; }

  struct Stats {
    uint64_t commands = 0;  // commands written
    uint64_t writes = 0;    // write system calls' worth of batches
    uint64_t deadline_exceeded = 0;
    uint64_t reconnects = 0;
    uint64_t noscript_retries = 0;
    uint64_t batches = 0;        // batch script calls written
    uint64_t batched_calls = 0;  // calls sent inside them
    // of those, calls sent reusing the arguments of the last call of their function
    // before them in the batch (all of them, or all but one)
    uint64_t shared_arguments = 0;
  };
  Stats stats() const;

 private:
  struct Session;
  struct Request {
    Callback done;  // empty once completed by the deadline timer
    Callback late;  // the reply after the deadline (Eval's `late`)
    Deadline deadline;
    std::chrono::steady_clock::time_point issued;
    uint64_t reply_reads_at_queue = 0;  // reply_reads_ when it joined the queue
    int script = -1;                    // for the NOSCRIPT retry
    int tail_items = 0;
    std::string tail;  // Eval: numkeys, keys, args; Call: args
    bool retried = false;
    // Call only (function >= 0): the key, the plain command, the batch function.
    int function = -1;
    std::string_view command;
    std::string key;
    uint32_t batch_tag = 0;
    // Set when written: the number of calls (this one and the ones after it in the
    // queue) that one reply answers; 1 for a command alone.
    std::size_t batch = 1;
    // When its bytes were handed to a write (the epoch until then). A call that this
    // process held for more than half its time before writing it (its event loop lagged:
    // other work on the I/O thread, a slow callback, CPU starvation) and that then missed
    // its deadline is no store failure (core/client_side.h).
    std::chrono::steady_clock::time_point written{};
  };
  enum class State { kIdle, kConnecting, kHandshaking, kReady, kDown, kShutdown };

  Connection(boost::asio::any_io_executor executor, Endpoint endpoint, ConnectionOptions options);

  // Queues a request whose bytes are already in `out_`-ready form via `write` (or, with
  // JoinBatch, adds it to the open batch). Fails fast
  // (inline callback) unless the connection is ready or `handshake` is set.
  template <typename WriteFn>
  void Enqueue(Request request, WriteFn&& write, bool handshake);
  // Enqueue's `write` for a Call's request that joins the open batch instead of being
  // written now (CloseBatchLocked writes the batch); any other `write` closes it first.
  struct JoinBatch {};
  // Queues the calls of a batch that got NOSCRIPT again, as EVAL of the batch script.
  void EnqueueBatchAgain(std::vector<Request> calls);
  // Writes the open batch (the last open_count_ requests of queue_) into out_.
  void CloseBatchLocked() SLUICE_REQUIRES(mu_);
  // "EVAL <source>" or "EVALSHA <sha>" of options.scripts[script]: the head of every
  // script call (the caller writes the array header and what follows).
  void AppendScriptHead(std::string& out, std::size_t script, bool eval) const;
  // A Call's request alone: EVALSHA (or EVAL with the source) or its plain command.
  void WriteAlone(std::string& out, const Request& r, bool eval) const;
  // Several Calls' requests as one batch script call (its arguments: redis/batch_codec.h).
  // Returns how many of them reuse the arguments of an earlier call of their function.
  std::size_t WriteBatch(std::string& out, Request* const* calls, std::size_t n, bool eval) const;
  // Runs the callbacks of one reply: a request alone, or the `n` calls of a batch.
  void Dispatch(Request& request, redisReply* reply);
  // Runs the callbacks of a batch's `n` calls with their parts of its reply (read by
  // redis/batch_codec.h's BatchReplyReader). Returns whether a call of the batch (or the
  // whole batch) was answered READONLY.
  bool DispatchBatch(Request* calls, std::size_t n, redisReply* reply);

  void Connect();
  void ConnectTcp(const std::shared_ptr<Session>& session, HostPort address);
  // The socket is connected (or failed `ec`): TLS next for rediss://, else the handshake.
  void OnSocketConnected(const std::shared_ptr<Session>& session, boost::system::error_code ec);
  void StartTls(const std::shared_ptr<Session>& session);
  // "host:port" of a session, and which primary it serves behind sentinels.
  std::string Where(const Session& session) const;
  // What a connection lost before its handshake ended may mean (a TLS mismatch), or "".
  std::string LostHint(const Session& session, boost::system::error_code ec) const;
  void OnConnected(const std::shared_ptr<Session>& session);
  // The handshake of a new session: one step per command (AUTH, SELECT, INFO and the
  // version check, then SCRIPT LOAD of each script; ROLE behind sentinels; SUBSCRIBE),
  // written at once, each reply checked; the last reply ends it (HandshakeDone).
  struct Handshaking;
  using HandshakeCheck = std::function<Status(const redisReply*)>;
  void Handshake(const std::shared_ptr<Session>& session);
  // Queues one step's command with the handshake's deadline; `check` reads its reply.
  void HandshakeIssue(const std::shared_ptr<Handshaking>& handshake, std::string command,
                      HandshakeCheck check);
  void HandshakeAuth(const std::shared_ptr<Handshaking>& handshake);
  void HandshakeSelect(const std::shared_ptr<Handshaking>& handshake);
  // INFO server: refuses a Redis older than 7.0 (options.require_redis_7), then loads
  // the scripts (HandshakeLoadScripts).
  void HandshakeCheckVersion(const std::shared_ptr<Handshaking>& handshake);
  void HandshakeLoadScripts(const std::shared_ptr<Handshaking>& handshake);
  // ROLE: behind sentinels, only a primary serves.
  void HandshakeCheckRole(const std::shared_ptr<Handshaking>& handshake);
  void HandshakeSubscribe(const std::shared_ptr<Handshaking>& handshake);
  void HandshakeDone(const std::shared_ptr<Session>& session, Status status);
  void StartRead(const std::shared_ptr<Session>& session);
  void StartWrite(const std::shared_ptr<Session>& session);
  void OnReplies(const std::shared_ptr<Session>& session, std::vector<redisReply*>& replies);
  // Expires the calls whose deadline passed and gives up a stalled connection.
  void OnTimer();
  // From when the store has held `r` up: when its bytes were handed to a write; not
  // written yet, when the write still in flight began (the store or the network is not
  // taking bytes); else never (time_point::max(): this process has not sent it).
  std::chrono::steady_clock::time_point SentAtLocked(const Request& r) const SLUICE_REQUIRES(mu_);
  void Break(const std::shared_ptr<Session>& session, Status why);
  void ScheduleReconnect();

  boost::asio::strand<boost::asio::any_io_executor> strand_;
  const Endpoint endpoint_;
  const ConnectionOptions options_;
  std::vector<std::string> shas_;          // per script, filled by the handshake (strand only)
  boost::asio::steady_timer timer_;        // deadlines and stalls
  boost::asio::steady_timer retry_timer_;  // connect timeout and reconnect backoff
  std::chrono::milliseconds backoff_;
  std::function<void(Status)> first_result_;  // strand only
  // rediss://: the client context (made once), or why it could not be made.
  std::shared_ptr<boost::asio::ssl::context> tls_context_;
  Status tls_error_;
  // Endpoint::Kind::kSentinel: the sentinel links that say where the primary is.
  std::shared_ptr<SentinelLocator> sentinel_;

  mutable Mutex mu_;
  State state_ SLUICE_GUARDED_BY(mu_) = State::kIdle;
  std::shared_ptr<Session> session_ SLUICE_GUARDED_BY(mu_);
  std::deque<Request> queue_ SLUICE_GUARDED_BY(mu_);  // in flight, FIFO = reply order
  std::string out_ SLUICE_GUARDED_BY(mu_);            // bytes not yet handed to a write
  bool write_posted_ SLUICE_GUARDED_BY(mu_) = false;  // a StartWrite is posted to the strand
  // An async_write is running; its completion flushes out_.
  bool write_in_flight_ SLUICE_GUARDED_BY(mu_) = false;
  bool corked_ SLUICE_GUARDED_BY(mu_) = false;
  // The open batch: the last open_count_ requests of queue_.
  std::size_t open_count_ SLUICE_GUARDED_BY(mu_) = 0;
  bool timer_armed_ SLUICE_GUARDED_BY(mu_) = false;
  Deadline armed_at_ SLUICE_GUARDED_BY(mu_) = Deadline::max();
  // How many reads brought replies: a deadline missed although replies kept coming after
  // the call joined the queue is a backlog in this client, not a silent store. Counted,
  // not timed, and compared with the count when the call was queued (both under mu_):
  // a call whose caller read the clock before a reply was handled, and queued after it,
  // did not wait behind that reply.
  uint64_t reply_reads_ SLUICE_GUARDED_BY(mu_) = 0;
  // When the write in flight (write_in_flight_) began.
  std::chrono::steady_clock::time_point write_started_at_ SLUICE_GUARDED_BY(mu_){};
  Status last_error_ SLUICE_GUARDED_BY(mu_);
  Stats stats_ SLUICE_GUARDED_BY(mu_);

  std::atomic<bool> ready_{false};
};

}  // namespace sluice::internal
