#include "service/bench/h2_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluiced::bench {

namespace {

nghttp2_nv Nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

int H2Call::GrpcStatus() const {
  for (const auto* m : {&trailers, &headers}) {
    auto it = m->find("grpc-status");
    if (it != m->end()) return std::atoi(it->second.c_str());
  }
  return -1;
}

std::string H2Call::GrpcMessage() const {
  for (const auto* m : {&trailers, &headers}) {
    auto it = m->find("grpc-message");
    if (it != m->end()) return it->second;
  }
  return "";
}

std::string GrpcFramed(std::string_view message, uint8_t flags) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out = {static_cast<char>(flags), static_cast<char>(n >> 24),
                     static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
  return out.append(message);
}

std::string H2Call::Message() const {
  if (data.size() < 5) return "";
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t len = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) |
                          (std::size_t{p[3]} << 8) | std::size_t{p[4]};
  return data.substr(5, len);
}

// nghttp2's callbacks; user_data is the H2Client.
struct H2ClientCallbacks {
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto* c = static_cast<H2Client*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    H2Call* call = c->call(frame->hd.stream_id);
    if (call == nullptr) return 0;
    auto& into = frame->headers.cat == NGHTTP2_HCAT_HEADERS ? call->trailers : call->headers;
    into[std::string(reinterpret_cast<const char*>(name), namelen)] =
        std::string(reinterpret_cast<const char*>(value), valuelen);
    return 0;
  }
  static int OnData(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                    void* user) {
    H2Call* call = static_cast<H2Client*>(user)->call(stream_id);
    if (call != nullptr) call->data.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<H2Client*>(user)->goaway_ = true;
    return 0;
  }
  static int OnClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
    auto* c = static_cast<H2Client*>(user);
    auto it = c->calls_.find(stream_id);
    if (it == c->calls_.end()) return 0;
    it->second->closed = true;
    it->second->reset_code = error_code;
    --c->open_calls_;
    if (c->on_close) {
      c->on_close(*it->second);
      c->calls_.erase(it);
    }
    return 0;
  }
  static ssize_t Read(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                      nghttp2_data_source* source, void*) {
    auto* call = static_cast<H2Call*>(source->ptr);
    const std::size_t n = std::min(length, call->body.size() - call->body_sent);
    std::memcpy(buf, call->body.data() + call->body_sent, n);
    call->body_sent += n;
    if (call->body_sent == call->body.size()) {
      if (!call->end_stream) {
        if (n == 0) return NGHTTP2_ERR_DEFERRED;
        return static_cast<ssize_t>(n);
      }
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return static_cast<ssize_t>(n);
  }
};

std::unique_ptr<H2Client> H2Client::Connect(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    error = gai_strerror(rc);
    return nullptr;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return nullptr;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::unique_ptr<H2Client> client(new H2Client());
  client->fd_ = fd;
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, &H2ClientCallbacks::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &H2ClientCallbacks::OnData);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &H2ClientCallbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &H2ClientCallbacks::OnClose);
  const int rc = nghttp2_session_client_new(&client->session_, cb, client.get());
  nghttp2_session_callbacks_del(cb);
  if (rc != 0) {
    error = nghttp2_strerror(rc);
    return nullptr;
  }
  // A large receive window: the load generator never waits for WINDOW_UPDATEs.
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
  nghttp2_submit_settings(client->session_, NGHTTP2_FLAG_NONE, settings, 1);
  nghttp2_session_set_local_window_size(client->session_, NGHTTP2_FLAG_NONE, 0, 1 << 26);
  return client;
}

H2Client::~H2Client() {
  nghttp2_session_del(session_);
  if (fd_ >= 0) ::close(fd_);
}

int32_t H2Client::Submit(const std::string& path, std::string body,
                         const std::vector<std::pair<std::string, std::string>>& extra,
                         bool end_stream) {
  static const std::string kMethod = ":method", kPost = "POST", kScheme = ":scheme", kHttp = "http",
                           kPath = ":path", kAuthority = ":authority", kHost = "localhost",
                           kType = "content-type", kGrpc = "application/grpc", kTe = "te",
                           kTrailers = "trailers";
  std::vector<nghttp2_nv> nva = {Nv(kMethod, kPost),    Nv(kScheme, kHttp), Nv(kPath, path),
                                 Nv(kAuthority, kHost), Nv(kType, kGrpc),   Nv(kTe, kTrailers)};
  for (const auto& [k, v] : extra) nva.push_back(Nv(k, v));
  auto call = std::make_unique<H2Call>();
  call->body = std::move(body);
  call->end_stream = end_stream;
  call->started = std::chrono::steady_clock::now();
  nghttp2_data_provider provider{};
  provider.source.ptr = call.get();
  provider.read_callback = &H2ClientCallbacks::Read;
  const int32_t id =
      nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, nullptr);
  if (id < 0) return id;
  call->stream_id = id;
  calls_[id] = std::move(call);
  ++open_calls_;
  return id;
}

void H2Client::Reset(int32_t stream_id) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
}

bool H2Client::SendRaw(std::string_view bytes) {
  pending_.append(bytes);
  return Flush();
}

H2Call* H2Client::call(int32_t stream_id) {
  auto it = calls_.find(stream_id);
  return it == calls_.end() ? nullptr : it->second.get();
}

bool H2Client::WantsWrite() const {
  return !pending_.empty() || nghttp2_session_want_write(session_) != 0;
}

bool H2Client::Flush() {
  if (!open_) return false;
  while (true) {
    while (pending_.size() < (64u << 10)) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return open_ = false;
      if (n == 0) break;
      pending_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (pending_.empty()) return true;
    const ssize_t n = ::send(fd_, pending_.data(), pending_.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      return open_ = false;
    }
    pending_.erase(0, static_cast<size_t>(n));
    if (!pending_.empty()) return true;  // the socket is full
  }
}

bool H2Client::OnReadable() {
  if (!open_) return false;
  if (!reading_) return true;
  uint8_t buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return open_ = false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return open_ = false;
    }
    if (nghttp2_session_mem_recv(session_, buf, static_cast<size_t>(n)) < 0) return open_ = false;
  }
}

bool H2Client::Pump(std::chrono::milliseconds wait) {
  if (!Flush()) return false;
  pollfd p{fd_, static_cast<short>((reading_ ? POLLIN : 0) | (WantsWrite() ? POLLOUT : 0)), 0};
  const int rc = ::poll(&p, 1, static_cast<int>(wait.count()));
  if (rc > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !OnReadable()) return false;
  return Flush();
}

bool H2Client::PumpUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done() && std::chrono::steady_clock::now() < until) {
    if (!Pump(std::chrono::milliseconds(10))) break;
  }
  return done();
}

}  // namespace sluiced::bench
