#include "service/h2_server.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include "service/h2_budget.h"
#include "service/h2_reply_queue.h"
#include "service/listener.h"

namespace sluiced {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
// A connection's executor: its handlers never run concurrently, on its own threads or on
// a given executor run by several (GrpcServerOptions::executor).
using Strand = asio::strand<asio::io_context::executor_type>;
using Socket = asio::basic_stream_socket<tcp, Strand>;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Strand>;

struct H2GrpcServer::Shared {
  GrpcServerOptions options;
  std::unordered_map<std::string, GrpcMethod> methods;  // by path
  Clock::duration tick{};                               // housekeeping period
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_option* option = nullptr;
  // Request bytes held by every connection together (max_server_buffer_bytes).
  mutable std::atomic<std::size_t> held{0};
  // Response bytes queued on asynchronous streaming calls (max_stream_queued_bytes,
  // max_server_queued_bytes).
  mutable std::atomic<std::size_t> queued{0};
  // State charged by asynchronous streaming calls (max_server_state_bytes).
  mutable ByteBudget state;
  ~Shared() {
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_option_del(option);
  }
};

namespace h2internal {
namespace {

nghttp2_nv Nv(std::string_view name, std::string_view value, uint8_t flags = NGHTTP2_NV_FLAG_NONE) {
  // nghttp2 copies names and values unless told not to; it never writes through these.
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          flags};
}
constexpr uint8_t kStatic = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
// The PING sent with a drain's shutdown notice (its acknowledgement is told apart from
// others by these bytes), and how long the final GOAWAY waits for it at most.
constexpr uint8_t kDrainPing[8] = {'s', 'l', 'u', 'i', 'c', 'e', 'd', 0};
constexpr auto kDrainNoticeGrace = std::chrono::seconds(1);

// The heap bytes a buffer holds (none while it fits in the string itself).
std::size_t HeapBytes(const std::string& b) {
  static const std::size_t kInline = std::string().capacity();
  return b.capacity() > kInline ? b.capacity() : 0;
}

// Methods whose calls take any number of request messages.
bool IsStreaming(const GrpcMethod& m) {
  return m.stream || m.open;
}

}  // namespace

struct Stream {
  int32_t id = 0;
  const GrpcMethod* method = nullptr;
  std::string path;
  std::string content_type;
  std::string timeout;  // grpc-timeout as sent
  bool has_timeout = false;
  bool post = false;
  std::size_t header_bytes = 0;
  Clock::time_point started;
  std::optional<Clock::time_point> deadline;
  std::string in;        // request bytes not yet taken as messages
  std::string message;   // a unary call's request message
  std::size_t held = 0;  // what `in` and `message` hold allocated, as last counted
  bool have_message = false;
  int messages = 0;                    // request messages taken
  bool request_ended = false;          // the client's END_STREAM arrived
  bool answered = false;               // the final status is submitted
  bool headers_sent = false;           // response HEADERS submitted with a data provider
  bool data_deferred = false;          // the data provider is waiting for more replies
  ReplyQueue out;                      // response bytes not yet taken by nghttp2
  std::optional<GrpcStatus> trailers;  // sent once `out` is taken
  // Asynchronous streaming calls (GrpcMethod::open): the call's state until it ends (its
  // `out` counted on the server), and whether one of its handlers runs (an end asked for
  // meanwhile waits in `end` until it returns).
  bool async = false;
  std::shared_ptr<StreamCall> call;
  bool in_handler = false;
  std::optional<GrpcStatus> end;
};

// A unary call whose request is complete, to hand to its handler after mem_recv.
struct PendingCall {
  const GrpcMethod* method;
  int32_t stream_id;
  std::string message;
};

class Connection;
using GrpcListener = Listener<Connection, std::shared_ptr<const H2GrpcServer::Shared>>;

// One client connection: its nghttp2 session, streams, timers and socket. Everything but
// Start, Drain, Shutdown and the destructor runs on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Socket socket, std::shared_ptr<GrpcListener> listener);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers the nghttp2 callbacks every connection's session uses.
  static void SetCallbacks(nghttp2_session_callbacks* callbacks);

  const Strand& strand() const { return strand_; }
  // On the connection's strand (its handlers, or a reply finished inside one of them).
  bool OnOwnThread() const { return strand_.running_in_this_thread(); }

  // Once, registered, from the acceptor's strand.
  void Start();
  // From any thread: drains the connection on its strand (H2GrpcServer::Drain).
  void Drain();
  // From any thread: closes the connection on its strand (H2GrpcServer::Stop).
  void Shutdown();
  // A unary call's answer, on the connection's strand (handed over by UnaryReply).
  void OnReply(int32_t stream_id, std::string message, GrpcStatus status);
  // An asynchronous streaming call's message and end, on the connection's strand (handed
  // over by StreamWriter).
  void OnSend(int32_t stream_id, std::string message);
  void OnFinish(int32_t stream_id, GrpcStatus status);
  // From any thread: the calls' state (StreamWriter::Charge).
  bool ChargeState(std::size_t n) { return TryChargeBoth(state_, shared_->state, n); }
  void UnchargeState(std::size_t n) {
    state_.Uncharge(n);
    shared_->state.Uncharge(n);
  }
  std::string StateBudgetText() const { return BudgetText(state_, shared_->state); }
  // From H2GrpcServer::Stop once the server's threads are stopped (nothing runs on the
  // strand any more): closes the connection on the calling thread, ending its calls.
  void CloseStopped() { Close(); }

 private:
  // nghttp2's callbacks (user_data is the Connection).
  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name_data,
                      size_t name_len, const uint8_t* value_data, size_t value_len, uint8_t,
                      void* user);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user);
  static int OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user);
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user);
  // The data provider of a stream's response: its replies, then its trailers.
  static ssize_t ReadData(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source* source, void* user);

  // The session and its SETTINGS, then the first read.
  void Begin();

  // Requests.
  Stream* Find(int32_t id);
  void OnRequestHeaders(Stream& s);
  void TakeMessages(Stream& s);
  void OnStreamMessage(Stream& s, std::string_view message);
  void KeepUnread(Stream& s, std::size_t taken);
  void OnEndOfRequest(Stream& s);

  // Asynchronous streaming calls.
  void OpenCall(Stream& s);
  void RunHandler(Stream& s, const std::function<GrpcStatus()>& handler);
  void EndCall(Stream& s);
  void Discard(Stream& s);

  // Request bytes held (max_connection_buffer_bytes, max_server_buffer_bytes).
  void Account(Stream& s);
  void Release(Stream& s);
  bool Reserve(Stream& s, std::string_view chunk);
  bool WithinBounds(std::size_t more, Stream& s);
  // The same for what is counted already (an allocation larger than foreseen).
  bool EnforceBounds(Stream& s) { return WithinBounds(0, s); }

  // Responses.
  void SubmitHeaders(Stream& s);
  void Answer(Stream& s, GrpcStatus status);

  // Timers.
  void ArmDeadline(Clock::time_point at);
  void OnDeadlines();
  void Tick();
  void OnTick();
  void ExpireSlowRequests(Clock::time_point now);
  void ResetStalledReplies(Clock::time_point now);

  // Input and output.
  void MaybeRead();
  void OnRead(boost::system::error_code ec, size_t n);
  void Dispatch();
  void ScheduleFlush();
  void Flush();
  bool TakeOutput();
  void WriteRest();

  // Drain and close.
  void StartDrain();
  void FinalGoaway();
  void EndOpenStream(Stream& s);
  void Finish();
  void Close();

  Strand strand_;
  Socket socket_;
  std::shared_ptr<GrpcListener> listener_;  // registers this connection for Stop
  std::shared_ptr<const H2GrpcServer::Shared> shared_;
  const GrpcServerOptions& options_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  std::array<uint8_t, 16384> in_{};
  std::string out_;
  std::size_t out_sent_ = 0;
  std::vector<PendingCall> pending_;  // unary calls to hand to their handlers
  std::vector<std::string> replies_;
  Timer tick_;
  Timer deadline_timer_;
  Clock::time_point deadline_at_;
  Clock::time_point accepted_, last_input_, write_started_;
  std::size_t buffered_ = 0;   // request bytes held by the streams (Stream::held)
  ByteBudget state_;           // the calls' state (max_connection_state_bytes)
  std::size_t in_flight_ = 0;  // unary calls with a handler, not answered
  bool deadline_armed_ = false;
  bool handshake_done_ = false;
  bool reading_ = false, writing_ = false, in_recv_ = false, flush_posted_ = false;
  bool dispatching_ = false;  // the connection's thread is running handlers
  bool going_away_ = false, closed_ = false;
  // Drain (H2GrpcServer::Drain): the shutdown notice is sent, the final GOAWAY is sent,
  // the sending side is shut and input is read until the client closes.
  bool draining_ = false, final_goaway_ = false, lingering_ = false;
  Clock::time_point drain_started_, linger_until_;
};

Connection::Connection(Socket socket, std::shared_ptr<GrpcListener> listener)
    : strand_(socket.get_executor()),
      socket_(std::move(socket)),
      listener_(std::move(listener)),
      shared_(listener_->context),
      options_(shared_->options),
      tick_(strand_),
      deadline_timer_(strand_) {
  state_.set_limit(options_.max_connection_state_bytes);
}

Connection::~Connection() {
  // The server's counts keep only live bytes; a call not ended by Close ends here (it
  // cannot hold a writer on this connection, or the connection would not be destroyed).
  for (auto& [id, s] : streams_) Discard(*s);
  // What a call did not give back leaves the server's count with its connection.
  shared_->state.Uncharge(state_.used());
  nghttp2_session_del(session_);
  listener_->Forget(this);
}

void Connection::SetCallbacks(nghttp2_session_callbacks* cb) {
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cb, &OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &OnDataChunk);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &OnFrameSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &OnStreamClose);
}

void Connection::Start() {
  asio::post(strand_, [self = shared_from_this()] { self->Begin(); });
}

void Connection::Drain() {
  asio::post(strand_, [self = shared_from_this()] { self->StartDrain(); });
}

void Connection::Shutdown() {
  asio::post(strand_, [self = shared_from_this()] { self->Close(); });
}

void Connection::Begin() {
  if (closed_) return;  // stopped before it started
  accepted_ = last_input_ = Clock::now();
  if (nghttp2_session_server_new2(&session_, shared_->callbacks, this, shared_->option) != 0)
    return Close();
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<uint32_t>(options_.max_header_list_bytes)},
  };
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings)) != 0)
    return Close();
  Tick();
  Flush();
  MaybeRead();
}

void Connection::OnReply(int32_t stream_id, std::string message, GrpcStatus status) {
  --in_flight_;
  if (closed_) return;
  auto it = streams_.find(stream_id);
  if (it == streams_.end() || it->second->answered) return;
  Stream& s = *it->second;
  if (status.ok()) {
    s.out.Append(message);
    s.trailers = GrpcStatus{};
    s.answered = true;
    SubmitHeaders(s);
  } else {
    Answer(s, std::move(status));
  }
  // A reply finished inside a handler is flushed after the dispatch; replies handed
  // over from other threads are flushed together once the ones queued ran.
  if (!dispatching_) ScheduleFlush();
}

void Connection::OnSend(int32_t stream_id, std::string message) {
  Stream* s = closed_ ? nullptr : Find(stream_id);
  if (s == nullptr || !s->async || s->answered || s->end) return;
  const std::size_t more = kGrpcPrefixBytes + message.size();
  std::string over;
  if (s->out.pending() + more > options_.max_stream_queued_bytes)
    over = std::to_string(options_.max_stream_queued_bytes) + " response bytes queued on this call";
  else if (shared_->queued.load(std::memory_order_relaxed) + more >
           options_.max_server_queued_bytes)
    over =
        std::to_string(options_.max_server_queued_bytes) + " response bytes queued on this server";
  if (!over.empty()) {
    // The client does not take what it is sent: what waits for it is dropped, and the
    // call ends (its status goes as soon as the client reads again).
    s->out.DropUnsent();
    Answer(*s, {GrpcCode::kResourceExhausted, "more than " + over});
  } else {
    s->out.Append(message);
    SubmitHeaders(*s);
  }
  if (!dispatching_) ScheduleFlush();  // as OnReply
}

void Connection::OnFinish(int32_t stream_id, GrpcStatus status) {
  Stream* s = closed_ ? nullptr : Find(stream_id);
  if (s == nullptr || !s->async || s->answered) return;
  Answer(*s, std::move(status));
  if (!dispatching_) ScheduleFlush();
}

// nghttp2's callbacks.

int Connection::OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto s = std::make_unique<Stream>();
  s->id = frame->hd.stream_id;
  s->started = Clock::now();
  c->streams_[s->id] = std::move(s);
  return 0;
}

int Connection::OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name_data,
                         size_t name_len, const uint8_t* value_data, size_t value_len, uint8_t,
                         void* user) {
  auto* c = static_cast<Connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  Stream* s = c->Find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  s->header_bytes += name_len + value_len + 32;  // as SETTINGS_MAX_HEADER_LIST_SIZE counts
  if (s->header_bytes > c->options_.max_header_list_bytes) {
    s->answered = true;
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // nghttp2 resets the stream
  }
  const std::string_view name(reinterpret_cast<const char*>(name_data), name_len);
  const std::string_view value(reinterpret_cast<const char*>(value_data), value_len);
  if (name == ":path") {
    s->path = value;
  } else if (name == ":method") {
    s->post = value == "POST";
  } else if (name == "content-type") {
    s->content_type = value;
  } else if (name == "grpc-timeout") {
    s->timeout = value;
    s->has_timeout = true;
  }
  return 0;
}

int Connection::OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Connection*>(user);
  if (frame->hd.type == NGHTTP2_SETTINGS) c->handshake_done_ = true;
  if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) != 0 &&
      std::memcmp(frame->ping.opaque_data, kDrainPing, sizeof kDrainPing) == 0)
    c->FinalGoaway();  // a round trip after the shutdown notice
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  Stream* s = c->Find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    c->OnRequestHeaders(*s);
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) c->OnEndOfRequest(*s);
  return 0;
}

int Connection::OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                            size_t len, void* user) {
  auto* c = static_cast<Connection*>(user);
  Stream* s = c->Find(stream_id);
  if (s == nullptr || s->answered) return 0;  // answered early: the rest is dropped
  const std::string_view chunk(reinterpret_cast<const char*>(data), len);
  // The bytes are counted before they are taken: a stream that would go over the
  // bounds is refused without allocating them.
  if (!c->Reserve(*s, chunk)) return 0;
  s->in.append(chunk);
  c->TakeMessages(*s);
  c->Account(*s);
  if (!s->answered) c->EnforceBounds(*s);
  return 0;
}

int Connection::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Connection*>(user);
  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
    return 0;
  // Answered before the request ended: the rest of the request is not wanted.
  Stream* s = c->Find(frame->hd.stream_id);
  if (s != nullptr && !s->request_ended)
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  return 0;
}

int Connection::OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user) {
  auto* c = static_cast<Connection*>(user);
  auto it = c->streams_.find(stream_id);
  if (it != c->streams_.end()) {
    c->Discard(*it->second);
    c->streams_.erase(it);
  }
  return 0;
}

ssize_t Connection::ReadData(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                             size_t length, uint32_t* flags, nghttp2_data_source* source,
                             void* /*user*/) {
  auto* s = static_cast<Stream*>(source->ptr);
  const std::size_t n = s->out.Take(buf, length);
  if (!s->out.empty()) return static_cast<ssize_t>(n);
  if (s->trailers) {
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const GrpcStatusFields status = EncodeGrpcStatus(*s->trailers);
    nghttp2_nv trailers[] = {Nv("grpc-status", status.code), Nv("grpc-message", status.message)};
    if (nghttp2_submit_trailer(session, stream_id, trailers, status.message.empty() ? 1 : 2) != 0)
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    return static_cast<ssize_t>(n);
  }
  if (n == 0) {
    s->data_deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

// Requests.

Stream* Connection::Find(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void Connection::OnRequestHeaders(Stream& s) {
  if (s.answered) return;
  if (!s.post) return Answer(s, {GrpcCode::kUnimplemented, "gRPC calls are POST requests"});
  if (!IsGrpcContentType(s.content_type))
    return Answer(s, {GrpcCode::kInvalidArgument,
                      "content-type must be application/grpc, not '" + s.content_type + "'"});
  auto it = shared_->methods.find(s.path);
  if (it == shared_->methods.end())
    return Answer(s, {GrpcCode::kUnimplemented, "unknown method " + s.path});
  s.method = &it->second;
  if (s.has_timeout) {
    std::chrono::nanoseconds timeout{};
    if (!ParseGrpcTimeout(s.timeout, timeout))
      return Answer(s, {GrpcCode::kInvalidArgument, "malformed grpc-timeout '" + s.timeout + "'"});
    s.deadline = s.started + std::chrono::duration_cast<Clock::duration>(timeout);
    ArmDeadline(*s.deadline);
  }
  if (s.method->open) OpenCall(s);
}

// Takes the complete messages out of s.in: a streaming method's handler sees each, a
// unary call keeps its one message for the end of the request.
void Connection::TakeMessages(Stream& s) {
  std::size_t pos = 0;
  while (!s.answered && s.method != nullptr) {
    const std::optional<GrpcPrefix> prefix = ReadGrpcPrefix(std::string_view(s.in).substr(pos));
    if (!prefix) break;
    if (auto refused = CheckGrpcPrefix(*prefix, options_.max_message_bytes)) {
      Answer(s, std::move(*refused));
      break;
    }
    if (s.in.size() - pos - kGrpcPrefixBytes < prefix->length) break;
    const std::string_view message(s.in.data() + pos + kGrpcPrefixBytes, prefix->length);
    pos += kGrpcPrefixBytes + prefix->length;
    ++s.messages;
    if (IsStreaming(*s.method)) {
      OnStreamMessage(s, message);
    } else if (s.have_message) {
      Answer(s, {GrpcCode::kInvalidArgument, "a unary call takes one request message"});
    } else if (pos == s.in.size() && pos == kGrpcPrefixBytes + prefix->length) {
      // The whole buffer is the message: moved, not copied (no second allocation).
      s.in.erase(0, kGrpcPrefixBytes);
      s.message.swap(s.in);
      s.in.clear();
      s.have_message = true;
      pos = 0;
    } else {
      s.message.assign(message);
      s.have_message = true;
    }
  }
  if (s.answered) return;  // Answer released the buffers
  KeepUnread(s, pos);
}

// A streaming method's request message: its handler's replies are queued in order (an
// asynchronous call's are sent by its writer).
void Connection::OnStreamMessage(Stream& s, std::string_view message) {
  if (s.async) {
    // Held here: the call may end (and the server drop it) inside OnMessage.
    const std::shared_ptr<StreamCall> call = s.call;
    if (call) RunHandler(s, [&] { return call->OnMessage(message); });
  } else {
    replies_.clear();
    GrpcStatus status = s.method->stream(message, replies_);
    for (const auto& r : replies_) s.out.Append(r);
    if (!replies_.empty()) SubmitHeaders(s);
    if (!status.ok()) Answer(s, std::move(status));
  }
  if (draining_) EndOpenStream(s);
}

// Drops the `taken` bytes from s.in. What is left is the start of the next message:
// keep no more than it needs.
void Connection::KeepUnread(Stream& s, std::size_t taken) {
  s.in.erase(0, taken);
  if (s.in.empty())
    std::string().swap(s.in);
  else if (s.in.capacity() > 2 * s.in.size() + 4096)
    s.in.shrink_to_fit();
}

void Connection::OnEndOfRequest(Stream& s) {
  s.request_ended = true;
  if (s.answered) return;
  if (s.method == nullptr) return Answer(s, {GrpcCode::kInternal, "request without headers"});
  if (!s.in.empty())
    return Answer(
        s, {GrpcCode::kInvalidArgument, "the request ends inside a gRPC message (" +
                                            std::to_string(s.in.size()) + " bytes left over)"});
  if (s.async) {
    const std::shared_ptr<StreamCall> call = s.call;
    RunHandler(s, [&] {
      StreamWriter writer(shared_from_this(), s.id);
      call->OnHalfClose(writer);
      return GrpcStatus{};
    });
    return;
  }
  if (s.method->stream) {
    if (s.method->finish_on_half_close) Answer(s, {});
    return;
  }
  if (!s.have_message)
    return Answer(s, {GrpcCode::kInvalidArgument, "a unary call takes one request message"});
  if (in_flight_ >= options_.max_calls_in_flight)
    return Answer(s, {GrpcCode::kResourceExhausted,
                      "more than " + std::to_string(options_.max_calls_in_flight) +
                          " calls in flight on this connection"});
  ++in_flight_;
  // Called after mem_recv: a handler may finish its reply at once, or call into code
  // that finishes other replies.
  pending_.push_back({s.method, s.id, std::move(s.message)});
  Account(s);
}

// Asynchronous streaming calls.

// Makes the call's state (GrpcMethod::open). A call opened while the server drains ends
// at once: its client goes elsewhere.
void Connection::OpenCall(Stream& s) {
  s.async = true;  // before open: a Send from inside it is queued
  s.out.CountIn(&shared_->queued);
  RunHandler(s, [&] {
    s.call = s.method->open(StreamWriter(shared_from_this(), s.id));
    return s.call ? GrpcStatus{} : GrpcStatus{GrpcCode::kInternal, "no call state for " + s.path};
  });
  if (draining_) EndOpenStream(s);
}

// Runs one of a call's handlers (open, OnMessage, OnHalfClose), then ends the call if the
// handler failed or if Finish (or a Send over the bound) asked for it meanwhile: ending it
// inside the handler would free the request message the handler reads and run OnClose
// under it.
void Connection::RunHandler(Stream& s, const std::function<GrpcStatus()>& handler) {
  s.in_handler = true;
  GrpcStatus status = handler();
  s.in_handler = false;
  std::optional<GrpcStatus> end = std::exchange(s.end, std::nullopt);
  if (!end && !status.ok()) end = std::move(status);
  if (end) Answer(s, std::move(*end));
}

// The call is over: OnClose, once, and the server drops the call (which may hold a
// writer, and so this connection).
void Connection::EndCall(Stream& s) {
  if (!s.call) return;
  const std::shared_ptr<StreamCall> call = std::move(s.call);
  s.call.reset();
  call->OnClose();
}

// The stream is gone (closed, reset, or its connection closed): its buffers are freed and
// its call ends.
void Connection::Discard(Stream& s) {
  s.answered = true;  // a Finish from OnClose submits nothing
  Release(s);
  s.out.Clear();
  EndCall(s);
}

// Request bytes held.

// Counts what the stream's buffers hold now, on the connection and on the server.
void Connection::Account(Stream& s) {
  const std::size_t now = HeapBytes(s.in) + HeapBytes(s.message);
  if (now >= s.held) {
    buffered_ += now - s.held;
    shared_->held.fetch_add(now - s.held, std::memory_order_relaxed);
  } else {
    buffered_ -= s.held - now;
    shared_->held.fetch_sub(s.held - now, std::memory_order_relaxed);
  }
  s.held = now;
}

// Frees the stream's request buffers (answered, reset, closed).
void Connection::Release(Stream& s) {
  std::string().swap(s.in);
  std::string().swap(s.message);
  Account(s);
}

// Makes room in s.in for `chunk`: for the message being read exactly its size (known
// from its prefix), so that it is allocated once. False, with the stream answered
// RESOURCE_EXHAUSTED and nothing allocated, when that would go over a bound.
bool Connection::Reserve(Stream& s, std::string_view chunk) {
  const std::size_t need = s.in.size() + chunk.size();
  if (need <= s.in.capacity()) return true;
  std::size_t want = need;
  if (need >= kGrpcPrefixBytes) {
    // The prefix may be split between what came before and this chunk.
    char head[kGrpcPrefixBytes];
    for (std::size_t i = 0; i < kGrpcPrefixBytes; ++i)
      head[i] = i < s.in.size() ? s.in[i] : chunk[i - s.in.size()];
    const uint32_t len = ReadGrpcPrefix({head, kGrpcPrefixBytes})->length;
    if (len <= options_.max_message_bytes)
      want = std::max<std::size_t>(need, kGrpcPrefixBytes + len);
  }
  const std::size_t after = want + HeapBytes(s.message);
  if (!WithinBounds(after > s.held ? after - s.held : 0, s)) return false;
  s.in.reserve(want);
  Account(s);
  return EnforceBounds(s);
}

// Whether `more` bytes for stream `s` fit the connection's and the server's bounds;
// answers the stream RESOURCE_EXHAUSTED (releasing what it holds) when not.
bool Connection::WithinBounds(std::size_t more, Stream& s) {
  if (buffered_ + more > options_.max_connection_buffer_bytes) {
    Answer(s, {GrpcCode::kResourceExhausted,
               "more than " + std::to_string(options_.max_connection_buffer_bytes) +
                   " request bytes buffered on this connection"});
    return false;
  }
  if (shared_->held.load(std::memory_order_relaxed) + more > options_.max_server_buffer_bytes) {
    Answer(s, {GrpcCode::kResourceExhausted, "more than " +
                                                 std::to_string(options_.max_server_buffer_bytes) +
                                                 " request bytes buffered on this server"});
    return false;
  }
  return true;
}

// Responses.

// Response HEADERS with a data provider (once per stream), or resumes the provider.
void Connection::SubmitHeaders(Stream& s) {
  if (s.headers_sent) {
    if (s.data_deferred) {
      s.data_deferred = false;
      nghttp2_session_resume_data(session_, s.id);
    }
    return;
  }
  s.headers_sent = true;
  const nghttp2_nv headers[] = {Nv(":status", "200", kStatic),
                                Nv("content-type", "application/grpc", kStatic)};
  nghttp2_data_provider provider{};
  provider.source.ptr = &s;
  provider.read_callback = &Connection::ReadData;
  if (nghttp2_submit_response(session_, s.id, headers, std::size(headers), &provider) != 0)
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_INTERNAL_ERROR);
}

// Ends the call with `status`: after the replies already queued, or as a Trailers-Only
// response when nothing was sent.
void Connection::Answer(Stream& s, GrpcStatus status) {
  if (s.answered) return;
  if (s.in_handler) {
    if (!s.end) s.end = std::move(status);  // the first end asked for wins (RunHandler)
    return;
  }
  s.answered = true;
  Release(s);
  EndCall(s);
  if (s.headers_sent || !s.out.empty()) {
    s.trailers = std::move(status);
    SubmitHeaders(s);
    return;
  }
  const GrpcStatusFields fields = EncodeGrpcStatus(status);
  const nghttp2_nv headers[] = {Nv(":status", "200", kStatic),
                                Nv("content-type", "application/grpc", kStatic),
                                Nv("grpc-status", fields.code), Nv("grpc-message", fields.message)};
  if (nghttp2_submit_response(session_, s.id, headers, fields.message.empty() ? 3 : 4, nullptr) !=
      0)
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_INTERNAL_ERROR);
}

// Timers.

// The deadline timer waits for the earliest grpc-timeout of the streams.
void Connection::ArmDeadline(Clock::time_point at) {
  if (deadline_armed_ && at >= deadline_at_) return;
  deadline_armed_ = true;
  deadline_at_ = at;
  deadline_timer_.expires_at(at);
  deadline_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || self->closed_) return;
    self->deadline_armed_ = false;
    self->OnDeadlines();
  });
}

void Connection::OnDeadlines() {
  const auto now = Clock::now();
  std::optional<Clock::time_point> next;
  for (auto& [id, s] : streams_) {
    if (s->answered || !s->deadline) continue;
    if (*s->deadline <= now) {
      Answer(*s,
             {GrpcCode::kDeadlineExceeded, "deadline exceeded (grpc-timeout " + s->timeout + ")"});
    } else if (!next || *s->deadline < *next) {
      next = s->deadline;
    }
  }
  if (next) ArmDeadline(*next);
  Flush();
  MaybeRead();
}

// Housekeeping: handshake, slow requests, blocked writes, idle connections.
void Connection::Tick() {
  tick_.expires_after(shared_->tick);
  tick_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || self->closed_) return;
    self->OnTick();
  });
}

void Connection::OnTick() {
  const auto now = Clock::now();
  if (!handshake_done_ && now - accepted_ > options_.handshake_timeout) return Close();
  if (writing_ && now - write_started_ > options_.write_timeout) return Close();
  ExpireSlowRequests(now);
  ResetStalledReplies(now);
  if (draining_ && !final_goaway_ && now - drain_started_ >= kDrainNoticeGrace) FinalGoaway();
  if (lingering_ && now > linger_until_) return Close();
  if (streams_.empty() && !going_away_ && now - last_input_ > options_.idle_timeout) {
    going_away_ = true;
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  }
  Flush();
  MaybeRead();
  if (!closed_) Tick();
}

// A request must arrive within read_timeout; a streaming call that has had a message may
// stay open (a reflection client between its requests).
void Connection::ExpireSlowRequests(Clock::time_point now) {
  for (auto& [id, s] : streams_) {
    const bool streaming = s->method != nullptr && IsStreaming(*s->method);
    if (s->answered || s->request_ended || (streaming && s->messages > 0) ||
        now - s->started <= options_.read_timeout)
      continue;
    Answer(*s, {GrpcCode::kDeadlineExceeded, "request not received within " +
                                                 std::to_string(options_.read_timeout.count()) +
                                                 " ms"});
  }
}

// A call whose queued response has not moved for stalled_reply_timeout (a client that
// does not read, or keeps its window closed) is reset (RST_STREAM is not flow-controlled:
// it reaches a client that reads nothing else), its queue freed and its call ended at
// once (a client that reads nothing at all is cut off by write_timeout).
void Connection::ResetStalledReplies(Clock::time_point now) {
  for (auto& [id, s] : streams_) {
    if (!s->async || s->out.pending() == 0 ||
        now - s->out.moved() <= options_.stalled_reply_timeout)
      continue;
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    Discard(*s);
  }
}

// Input and output.

void Connection::MaybeRead() {
  if (closed_ || reading_) return;
  if (!lingering_) {
    if (writing_) return;
    if (!nghttp2_session_want_read(session_)) {
      if (!nghttp2_session_want_write(session_)) Finish();
      return;
    }
  }
  reading_ = true;
  socket_.async_read_some(
      asio::buffer(in_),
      [self = shared_from_this()](boost::system::error_code ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(boost::system::error_code ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec) return Close();
  if (lingering_) return MaybeRead();  // after the last frame: input is dropped
  last_input_ = Clock::now();
  in_recv_ = true;
  const ssize_t rv = nghttp2_session_mem_recv(session_, in_.data(), n);
  in_recv_ = false;
  if (rv < 0) {
    // Not HTTP/2, or a protocol error: send the GOAWAY nghttp2 may have queued, close.
    Flush();
    return Close();
  }
  if (!pending_.empty()) Dispatch();
  Flush();
  MaybeRead();
}

// Hands the unary calls whose requests are complete to their handlers. Their replies
// finished meanwhile on this thread are sent by the Flush after it, together.
void Connection::Dispatch() {
  std::vector<PendingCall> calls;
  calls.swap(pending_);
  dispatching_ = true;
  auto self = shared_from_this();
  for (auto& call : calls) call.method->unary(call.message, UnaryReply(self, call.stream_id));
  dispatching_ = false;
}

void Connection::ScheduleFlush() {
  if (in_recv_ || flush_posted_ || closed_) return;
  flush_posted_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->Flush();
    self->MaybeRead();
  });
}

// Everything nghttp2 has to send, in one non-blocking send when it fits the socket; the
// rest asynchronously (and no reading until it is written: a client that does not read
// its answers gets no more of them computed).
void Connection::Flush() {
  while (!closed_ && !writing_) {
    if (!TakeOutput()) return Close();
    if (out_.empty()) {
      if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) Finish();
      return;
    }
    boost::system::error_code ec;
    const std::size_t sent = socket_.send(asio::buffer(out_), 0, ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return Close();
    if (sent == out_.size()) continue;
    writing_ = true;
    write_started_ = Clock::now();
    out_sent_ = sent;
    return WriteRest();
  }
}

// Up to 256 KiB of what nghttp2 has to send, into out_; false on a session error.
bool Connection::TakeOutput() {
  out_.clear();
  while (out_.size() < (256u << 10)) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return false;
    if (n == 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  return true;
}

// The rest of out_ (from out_sent_).
void Connection::WriteRest() {
  asio::async_write(socket_, asio::buffer(out_) + out_sent_,
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) return self->Close();
                      self->Flush();
                      self->MaybeRead();
                    });
}

// Drain and close.

// Stops accepting new streams: GOAWAY as a shutdown notice and a PING; FinalGoaway once
// the PING is acknowledged (or after a grace).
void Connection::StartDrain() {
  if (closed_ || draining_) return;
  draining_ = true;
  going_away_ = true;  // the idle timeout sends no GOAWAY of its own now
  drain_started_ = Clock::now();
  if (session_ == nullptr) return Close();
  for (auto& [id, s] : streams_) EndOpenStream(*s);
  if (nghttp2_submit_shutdown_notice(session_) != 0 ||
      nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, kDrainPing) != 0)
    FinalGoaway();
  Flush();
  MaybeRead();
}

// GOAWAY with the last stream id taken: later streams are refused; the connection closes
// once the streams up to it are done.
void Connection::FinalGoaway() {
  if (!draining_ || final_goaway_ || closed_) return;
  final_goaway_ = true;
  if (nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                            nullptr, 0) != 0)
    return Close();
  if (!in_recv_) {
    Flush();
    MaybeRead();
  }
}

// A streaming call that would stay open (a health watch, an asynchronous call) ends when
// the server drains: its drain reply, then UNAVAILABLE (after what is queued).
void Connection::EndOpenStream(Stream& s) {
  if (s.answered || s.method == nullptr) return;
  if (!s.async && (!s.method->stream || s.method->finish_on_half_close)) return;
  if (!s.method->drain_reply.empty() && s.messages > 0) {
    s.out.Append(s.method->drain_reply);
    SubmitHeaders(s);
  }
  Answer(s, {GrpcCode::kUnavailable, "the server is shutting down"});
}

// Nothing more to send or take: close. After a drain's GOAWAY the sending side is shut
// first and input read (and dropped) until the client closes, or for at most a second:
// closing a socket with unread input would reset the connection, and the client could
// lose the last responses.
void Connection::Finish() {
  if (!draining_) return Close();
  if (lingering_) return;
  lingering_ = true;
  linger_until_ = Clock::now() + kDrainNoticeGrace;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  MaybeRead();
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  for (auto& [id, s] : streams_) Discard(*s);
  boost::system::error_code ignored;
  tick_.cancel();
  deadline_timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace h2internal

UnaryReply::UnaryReply(std::shared_ptr<h2internal::Connection> connection, int32_t stream_id)
    : connection_(std::move(connection)), stream_id_(stream_id) {}

void UnaryReply::Finish(std::string message) {
  if (connection_->OnOwnThread()) {
    connection_->OnReply(stream_id_, std::move(message), {});
    return;
  }
  const Strand& strand = connection_->strand();
  asio::post(strand, [c = std::move(connection_), id = stream_id_,
                      m = std::move(message)]() mutable { c->OnReply(id, std::move(m), {}); });
}

void UnaryReply::Fail(GrpcStatus status) {
  if (status.ok()) status = {GrpcCode::kUnknown, "Fail called with OK"};
  if (connection_->OnOwnThread()) {
    connection_->OnReply(stream_id_, {}, std::move(status));
    return;
  }
  const Strand& strand = connection_->strand();
  asio::post(strand, [c = std::move(connection_), id = stream_id_,
                      s = std::move(status)]() mutable { c->OnReply(id, {}, std::move(s)); });
}

StreamWriter::StreamWriter(std::shared_ptr<h2internal::Connection> connection, int32_t stream_id)
    : connection_(std::move(connection)), stream_id_(stream_id) {}

void StreamWriter::Send(std::string message) {
  if (connection_->OnOwnThread()) return connection_->OnSend(stream_id_, std::move(message));
  // Posted in order: a strand runs what is posted to it first in, first out.
  asio::post(connection_->strand(),
             [c = connection_, id = stream_id_, m = std::move(message)]() mutable {
               c->OnSend(id, std::move(m));
             });
}

void StreamWriter::Finish(GrpcStatus status) {
  if (connection_->OnOwnThread()) return connection_->OnFinish(stream_id_, std::move(status));
  asio::post(connection_->strand(),
             [c = connection_, id = stream_id_, s = std::move(status)]() mutable {
               c->OnFinish(id, std::move(s));
             });
}

bool StreamWriter::Charge(std::size_t bytes) {
  return connection_->ChargeState(bytes);
}

void StreamWriter::Uncharge(std::size_t bytes) {
  connection_->UnchargeState(bytes);
}

std::string StreamWriter::BudgetText() const {
  return connection_->StateBudgetText();
}

namespace {

// What the server's connections share: the options, the methods by path, the
// housekeeping period and nghttp2's callbacks and options.
std::shared_ptr<H2GrpcServer::Shared> NewShared(GrpcServerOptions options,
                                                std::vector<GrpcMethod> methods) {
  auto shared = std::make_shared<H2GrpcServer::Shared>();
  shared->options = std::move(options);
  for (auto& m : methods) {
    std::string path = m.path;
    shared->methods.emplace(std::move(path), std::move(m));
  }
  const auto& o = shared->options;
  shared->state.set_limit(o.max_server_state_bytes);
  const auto shortest = std::min({o.handshake_timeout, o.read_timeout, o.write_timeout,
                                  o.idle_timeout, o.stalled_reply_timeout});
  shared->tick = std::clamp<Clock::duration>(shortest / 4, std::chrono::milliseconds(5),
                                             std::chrono::seconds(1));
  nghttp2_session_callbacks_new(&shared->callbacks);
  h2internal::Connection::SetCallbacks(shared->callbacks);
  nghttp2_option_new(&shared->option);
  // Our replies are small; a client that floods PINGs or SETTINGS without reading the
  // acknowledgements is cut off early.
  nghttp2_option_set_max_outbound_ack(shared->option, 100);
  nghttp2_option_set_max_settings(shared->option, 32);
  return shared;
}

}  // namespace

sluice::StatusOr<std::unique_ptr<H2GrpcServer>> H2GrpcServer::Start(
    GrpcServerOptions options, std::vector<GrpcMethod> methods) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec)
    return sluice::InvalidArgumentError("bad listen address '" + options.host +
                                        "': " + ec.message());
  std::shared_ptr<Shared> shared = NewShared(std::move(options), std::move(methods));
  const GrpcServerOptions& o = shared->options;
  std::unique_ptr<H2GrpcServer> server(new H2GrpcServer());
  std::vector<asio::io_context::executor_type> executors;
  if (o.executor) {
    executors.push_back(*o.executor);
  } else {
    for (int i = 0; i < std::max(1, o.threads); ++i) {
      server->ios_.push_back(std::make_unique<asio::io_context>(1));
      CreateReactorNow(*server->ios_.back());
      server->work_.push_back(asio::make_work_guard(*server->ios_.back()));
      executors.push_back(server->ios_.back()->get_executor());
    }
  }
  const tcp::endpoint endpoint(address, o.port);
  const std::string where =
      (address.is_v6() ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.port);
  using h2internal::GrpcListener;
  auto listener = std::make_shared<GrpcListener>(
      "grpc", std::move(shared), std::move(executors),
      [](GrpcListener::Socket socket,
         std::shared_ptr<GrpcListener> on) -> std::shared_ptr<h2internal::Connection> {
        boost::system::error_code failed;
        socket.non_blocking(true, failed);
        if (failed) return nullptr;
        return std::make_shared<h2internal::Connection>(std::move(socket), std::move(on));
      });
  if (ec = listener->Listen(endpoint); ec)
    return sluice::UnavailableError("cannot listen on " + where + ": " + ec.message());
  server->port_ = listener->port();
  server->listener_ = listener;
  listener->Start();
  for (auto& io : server->ios_) server->threads_.emplace_back([io = io.get()] { io->run(); });
  return server;
}
void H2GrpcServer::Drain() {
  if (!stopped_) listener_->Drain();
}

std::size_t H2GrpcServer::open_connections() const {
  return listener_->open_connections();
}

void H2GrpcServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // A server whose listener could not listen (Start failed) started no thread.
  if (!listener_) return;
  // Closes the acceptor and every connection; on a given executor that is all (what is
  // still queued there holds the listener until it has run).
  listener_->Stop();
  if (ios_.empty()) return;
  work_.clear();
  for (auto& io : ios_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // The closes posted above may not have run before the threads stopped: the connections
  // still open close here, so that their asynchronous calls end (a call's state may hold
  // its writer, and so its connection, until then).
  for (auto& connection : listener_->OpenConnections()) connection->CloseStopped();
}

std::size_t H2GrpcServer::buffered_bytes() const {
  return listener_->context->held.load(std::memory_order_relaxed);
}

std::size_t H2GrpcServer::queued_bytes() const {
  return listener_->context->queued.load(std::memory_order_relaxed);
}

std::size_t H2GrpcServer::state_bytes() const {
  return listener_->context->state.used();
}

H2GrpcServer::~H2GrpcServer() {
  Stop();
}

}  // namespace sluiced
