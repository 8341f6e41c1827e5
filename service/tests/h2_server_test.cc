// sluiced's own HTTP/2 gRPC server (service/h2_server.h) in-process with test methods,
// driven by the lean client (service/bench/h2_client.h), which can send what a gRPC
// library never does: bad prefixes, truncated and oversized messages, garbage, requests
// that never end, and a client that stops reading; and asynchronous streaming calls
// (StreamCall) whose replies come from other threads.
#include "service/h2_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/asio/steady_timer.hpp>

#include "service/bench/h2_client.h"

namespace sluiced {
namespace {

using bench::GrpcFramed;
using bench::H2Call;
using bench::H2Client;
using namespace std::chrono_literals;

// An asynchronous streaming call that keeps its writer (its replies come later, from
// other threads) and records what happens to it. A message "fail" fails the call; one
// starting "finish" sends "bye" and finishes the call inside OnMessage, then sends more
// (dropped) and reads the message again; any other is echoed at once, from the
// connection's strand.
struct RecordingCall : StreamCall {
  explicit RecordingCall(StreamWriter w) : writer(std::move(w)) {}
  GrpcStatus OnMessage(std::string_view m) override {
    if (m == "fail") return {GrpcCode::kInvalidArgument, "asked to fail"};
    if (m.starts_with("finish")) {
      writer.Send("bye");
      writer.Finish({GrpcCode::kNotFound, "finished"});
      writer.Send("dropped");
    } else {
      writer.Send("echo:" + std::string(m));
    }
    std::lock_guard lock(mu);
    messages.emplace_back(m);  // still valid after the Finish above
    return {};
  }
  // The call stays open after the client's half-close: the test finishes it.
  void OnHalfClose(StreamWriter&) override { half_closed = true; }
  void OnClose() override { ++closes; }

  StreamWriter writer;
  std::mutex mu;
  std::vector<std::string> messages;
  std::atomic<bool> half_closed{false};
  std::atomic<int> closes{0};
};

class H2Server : public ::testing::Test {
 protected:
  void SetUp() override {}
  void TearDown() override {
    if (server_) server_->Stop();
    for (auto& t : repliers_) t.join();
  }

  void Start(GrpcServerOptions options = {}) {
    std::vector<GrpcMethod> methods;
    methods.push_back({.path = "/test.Echo/Unary", .unary = [](std::string_view in, UnaryReply r) {
                         r.Finish(std::string(in));
                       }});
    // Answers from another thread, as the engine's completions do.
    methods.push_back(
        {.path = "/test.Echo/Async", .unary = [this](std::string_view in, UnaryReply r) {
           std::lock_guard lock(mu_);
           repliers_.emplace_back([r, m = std::string(in)]() mutable {
             std::this_thread::sleep_for(2ms);
             r.Finish(m);
           });
         }});
    // Never answers (the replies are kept until the test ends).
    methods.push_back({.path = "/test.Echo/Never", .unary = [this](std::string_view, UnaryReply r) {
                         std::lock_guard lock(mu_);
                         kept_.push_back(std::move(r));
                       }});
    // Answers with as many bytes as the request's decimal number says.
    methods.push_back({.path = "/test.Echo/Big", .unary = [](std::string_view in, UnaryReply r) {
                         r.Finish(std::string(std::stoul(std::string(in)), 'x'));
                       }});
    methods.push_back(
        {.path = "/test.Echo/Stream",
         .stream = [](std::string_view in, std::vector<std::string>& out) -> GrpcStatus {
           if (in == "fail") return {GrpcCode::kInvalidArgument, "asked to fail: 100% sure"};
           out.emplace_back("echo:" + std::string(in));
           return {};
         }});
    methods.push_back({.path = "/test.Echo/Calls", .open = [this](StreamWriter w) {
                         auto call = std::make_shared<RecordingCall>(std::move(w));
                         std::lock_guard lock(mu_);
                         calls_.push_back(call);
                         return call;
                       }});
    options.threads = 1;  // one thread: a stuck connection would stall every other one
    auto server = H2GrpcServer::Start(options, std::move(methods));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  std::unique_ptr<H2Client> Connect() {
    std::string error;
    auto client = H2Client::Connect("127.0.0.1", server_->port(), error);
    EXPECT_TRUE(client) << error;
    return client;
  }

  // One call on a fresh connection, pumped until it closes.
  H2Call Call(const std::string& path, std::string body,
              const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    auto client = Connect();
    const int32_t id = client->Submit(path, std::move(body), extra);
    EXPECT_GT(id, 0);
    client->PumpUntil([&] { return client->call(id)->closed; }, 10s);
    EXPECT_TRUE(client->call(id)->closed);
    return *client->call(id);
  }

  // 250 calls "m" on each of `clients` (more than the server's 100 concurrent streams:
  // the client queues the rest until streams close), path(i) for the i-th; pumped until
  // all are answered (60 s at most). Returns how many were answered "m" with OK.
  int ManyCalls(std::vector<std::unique_ptr<H2Client>>& clients,
                const std::function<std::string(int)>& path) {
    int ok = 0, done = 0;
    const int all = 250 * static_cast<int>(clients.size());
    for (auto& c : clients) {
      c->on_close = [&](H2Call& call) {
        ++done;
        ok += call.GrpcStatus() == 0 && call.Message() == "m" ? 1 : 0;
      };
      for (int i = 0; i < 250; ++i) c->Submit(path(i), GrpcFramed("m"));
    }
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (done < all && std::chrono::steady_clock::now() < until) {
      for (auto& c : clients) c->Pump(1ms);
    }
    EXPECT_EQ(done, all);
    for (auto& c : clients) c->on_close = nullptr;
    return ok;
  }

  // An asynchronous call opened with `body` (not half-closed unless end_stream), once the
  // server has made its state.
  std::pair<int32_t, std::shared_ptr<RecordingCall>> OpenCall(H2Client& client,
                                                              std::string body = "",
                                                              bool end_stream = false) {
    std::size_t before;
    {
      std::lock_guard lock(mu_);
      before = calls_.size();
    }
    const int32_t id = client.Submit("/test.Echo/Calls", std::move(body), {}, end_stream);
    EXPECT_GT(id, 0);
    std::shared_ptr<RecordingCall> call;
    client.PumpUntil(
        [&] {
          std::lock_guard lock(mu_);
          if (calls_.size() > before) call = calls_[before];
          return call != nullptr;
        },
        10s);
    EXPECT_TRUE(call);
    return {id, call};
  }

  // Waits (pumping `client`, if any) until `call` has closed, then a little longer: it
  // must have closed exactly once.
  static void ExpectClosedOnce(RecordingCall& call, H2Client* client = nullptr) {
    const auto pump = [client] {
      if (client != nullptr && client->open())
        client->Pump(1ms);
      else
        std::this_thread::sleep_for(1ms);
    };
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (call.closes == 0 && std::chrono::steady_clock::now() < until) pump();
    for (int i = 0; i < 20; ++i) pump();  // a second OnClose would come meanwhile
    EXPECT_EQ(call.closes, 1);
  }

  // The server still answers a new connection.
  void ExpectServing() {
    const H2Call c = Call("/test.Echo/Unary", GrpcFramed("still here"));
    EXPECT_EQ(c.GrpcStatus(), 0);
    EXPECT_EQ(c.Message(), "still here");
  }

  std::unique_ptr<H2GrpcServer> server_;
  std::mutex mu_;
  std::vector<std::thread> repliers_;
  std::vector<UnaryReply> kept_;
  // Asynchronous calls, as opened (each holds its writer, and so its connection).
  std::vector<std::shared_ptr<RecordingCall>> calls_;
};

TEST_F(H2Server, UnaryCallHasHeadersMessageAndTrailers) {
  Start();
  const H2Call c = Call("/test.Echo/Unary", GrpcFramed("hello"));
  EXPECT_EQ(c.headers.at(":status"), "200");
  EXPECT_EQ(c.headers.at("content-type"), "application/grpc");
  EXPECT_EQ(c.Message(), "hello");
  EXPECT_EQ(c.trailers.at("grpc-status"), "0");
  EXPECT_EQ(c.trailers.count("grpc-message"), 0u);
  EXPECT_EQ(c.reset_code, 0u);
  // An empty message is a message.
  EXPECT_EQ(Call("/test.Echo/Unary", GrpcFramed("")).GrpcStatus(), 0);
}

TEST_F(H2Server, UnknownMethodIsUnimplemented) {
  Start();
  const H2Call c = Call("/test.Echo/Nope", GrpcFramed("x"));
  EXPECT_EQ(c.GrpcStatus(), 12);
  EXPECT_EQ(c.GrpcMessage(), "unknown method /test.Echo/Nope");
  EXPECT_TRUE(c.data.empty());  // Trailers-Only
}

TEST_F(H2Server, MalformedMessagesAreAnsweredWithStatuses) {
  Start();
  // Flags byte other than 0 or 1.
  H2Call c = Call("/test.Echo/Unary", GrpcFramed("x", 7));
  EXPECT_EQ(c.GrpcStatus(), 3);
  EXPECT_EQ(c.GrpcMessage(), "malformed gRPC message prefix (flags byte 7)");
  // Compressed: not supported.
  EXPECT_EQ(Call("/test.Echo/Unary", GrpcFramed("x", 1)).GrpcStatus(), 12);
  // Truncated: the prefix promises 100 bytes, 3 come.
  c = Call("/test.Echo/Unary", GrpcFramed(std::string(100, 'a')).substr(0, 8));
  EXPECT_EQ(c.GrpcStatus(), 3);
  EXPECT_NE(c.GrpcMessage().find("ends inside a gRPC message"), std::string::npos);
  // A prefix cut short.
  EXPECT_EQ(Call("/test.Echo/Unary", std::string("\0\0", 2)).GrpcStatus(), 3);
  // No message, two messages.
  EXPECT_EQ(Call("/test.Echo/Unary", "").GrpcStatus(), 3);
  EXPECT_EQ(Call("/test.Echo/Unary", GrpcFramed("a") + GrpcFramed("b")).GrpcStatus(), 3);
  // Not application/grpc.
  EXPECT_EQ(
      Call("/test.Echo/Unary", GrpcFramed("a"), {{"content-type", "text/plain"}}).GrpcStatus(), 3);
  ExpectServing();
}

TEST_F(H2Server, GrpcMessageIsPercentEncoded) {
  Start();
  const H2Call c = Call("/test.Echo/Stream", GrpcFramed("fail"));
  EXPECT_EQ(c.GrpcStatus(), 3);
  EXPECT_EQ(c.GrpcMessage(), "asked to fail: 100%25 sure");
}

TEST_F(H2Server, OversizedMessageIsResourceExhaustedAtOnce) {
  Start();
  // Exactly the limit passes.
  const std::string limit(1 << 20, 'm');
  H2Call c = Call("/test.Echo/Unary", GrpcFramed(limit));
  EXPECT_EQ(c.GrpcStatus(), 0);
  EXPECT_EQ(c.Message().size(), limit.size());
  // One byte more is refused from its prefix alone, before the body is sent.
  auto client = Connect();
  const std::string prefix = GrpcFramed(std::string((1 << 20) + 1, 'm')).substr(0, 5);
  const int32_t id = client->Submit("/test.Echo/Unary", prefix + "mm", {}, /*end_stream=*/false);
  ASSERT_TRUE(client->PumpUntil([&] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(id)->GrpcStatus(), 8);
  EXPECT_EQ(client->call(id)->GrpcMessage(),
            "request message of 1048577 bytes is larger than the 1048576-byte limit");
  ExpectServing();
}

TEST_F(H2Server, GrpcTimeoutExpiresUnansweredCalls) {
  Start();
  auto client = Connect();
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t expiring =
      client->Submit("/test.Echo/Never", GrpcFramed("x"), {{"grpc-timeout", "50m"}});
  const int32_t answered =
      client->Submit("/test.Echo/Unary", GrpcFramed("y"), {{"grpc-timeout", "50m"}});
  ASSERT_TRUE(client->PumpUntil([&] { return client->call(expiring)->closed; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_EQ(client->call(expiring)->GrpcStatus(), 4);
  EXPECT_EQ(client->call(expiring)->GrpcMessage(), "deadline exceeded (grpc-timeout 50m)");
  EXPECT_EQ(client->call(answered)->GrpcStatus(), 0);
  // Malformed timeouts are refused.
  EXPECT_EQ(Call("/test.Echo/Unary", GrpcFramed("x"), {{"grpc-timeout", "5x"}}).GrpcStatus(), 3);
  EXPECT_EQ(
      Call("/test.Echo/Unary", GrpcFramed("x"), {{"grpc-timeout", "123456789S"}}).GrpcStatus(), 3);
}

// Streams that send a whole unary message but never END_STREAM hold their bytes until
// they are answered or reset: at most max_connection_buffer_bytes per connection and
// max_server_buffer_bytes over all of them; the stream that would go over is answered
// RESOURCE_EXHAUSTED at once, and what the others hold is freed when they are reset.
TEST_F(H2Server, RequestBytesHeldAreBoundedPerConnectionAndPerServer) {
  constexpr std::size_t kMessage = 256 << 10;
  Start({.max_connection_buffer_bytes = 1 << 20, .max_server_buffer_bytes = 3 << 20});
  const std::string body = GrpcFramed(std::string(kMessage, 'm'));
  // One message after the other, each sent whole before the next stream starts: no
  // bound is reached by messages still arriving side by side.
  std::vector<std::unique_ptr<H2Client>> clients;
  std::vector<std::vector<int32_t>> ids(4);
  for (int c = 0; c < 4; ++c) clients.push_back(Connect());
  for (int i = 0; i < 20; ++i) {
    for (int c = 0; c < 4; ++c) {
      H2Client& client = *clients[c];
      const int32_t id = client.Submit("/test.Echo/Never", body, {}, false);
      ids[c].push_back(id);
      ASSERT_TRUE(client.PumpUntil(
          [&] { return client.call(id)->closed || client.call(id)->body_sent == body.size(); },
          10s));
    }
  }
  for (auto& c : clients) c->Pump(20ms);  // the server has taken the last bytes in
  std::size_t held = 0, by_connection = 0, by_server = 0;
  for (int c = 0; c < 4; ++c) {
    std::size_t open = 0;
    for (int32_t id : ids[c]) {
      const H2Call* call = clients[c]->call(id);
      if (!call->closed) {
        ++open;
        continue;
      }
      EXPECT_EQ(call->GrpcStatus(), 8) << call->GrpcMessage();
      const std::string m = call->GrpcMessage();
      by_connection += m == "more than 1048576 request bytes buffered on this connection";
      by_server += m == "more than 3145728 request bytes buffered on this server";
    }
    // 3 messages (and their prefixes) fit in 1 MiB, a 4th does not.
    EXPECT_LE(open, 3u) << "connection " << c;
    held += open;
  }
  EXPECT_LE(held, 11u);  // 11 fit in 3 MiB
  EXPECT_GE(held, 8u);
  EXPECT_GT(by_connection, 0u);
  EXPECT_GT(by_server, 0u);
  EXPECT_EQ(by_connection + by_server + held, 80u);
  EXPECT_LE(server_->buffered_bytes(), std::size_t{3} << 20);
  EXPECT_GE(server_->buffered_bytes(), held * kMessage);
  // Small calls are still answered (the bounds count heap bytes; a tiny message has none).
  ExpectServing();
  // Resetting the held streams frees what they hold.
  for (int c = 0; c < 4; ++c)
    for (int32_t id : ids[c])
      if (!clients[c]->call(id)->closed) clients[c]->Reset(id);
  const auto freed_until = std::chrono::steady_clock::now() + 10s;
  while (server_->buffered_bytes() != 0 && std::chrono::steady_clock::now() < freed_until)
    for (auto& c : clients) c->Pump(1ms);
  EXPECT_EQ(server_->buffered_bytes(), 0u);
  // And a stream that sends its message and ends is answered as usual (the bytes it
  // held were counted and released).
  const H2Call c = Call("/test.Echo/Unary", body);
  EXPECT_EQ(c.GrpcStatus(), 0);
  EXPECT_EQ(c.Message().size(), kMessage);
  EXPECT_EQ(server_->buffered_bytes(), 0u);
}

// Replies finished on other threads are handed to each connection's thread.
TEST_F(H2Server, ManyConcurrentStreamsOnFewConnections) {
  Start();
  std::vector<std::unique_ptr<H2Client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Connect());
  EXPECT_EQ(ManyCalls(clients, [](int) { return "/test.Echo/Async"; }), 1000);
}

// On a given executor run by two threads (as sluiced runs it on a store client with
// --io-threads 2): each connection's handlers on its strand, every call answered; Stop
// closes every connection while the executor runs on.
TEST_F(H2Server, OnAGivenExecutorOfTwoThreadsAndStopClosesEveryConnection) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&io] { io.run(); });
  Start({.executor = io.get_executor()});
  std::vector<std::unique_ptr<H2Client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Connect());
  EXPECT_EQ(
      ManyCalls(clients, [](int i) { return i % 2 ? "/test.Echo/Async" : "/test.Echo/Unary"; }),
      1000);
  {
    // Every reply is in: the repliers posted to `io` for the last time.
    std::lock_guard lock(mu_);
    for (auto& t : repliers_) t.join();
    repliers_.clear();
  }
  server_->Stop();
  for (auto& c : clients) EXPECT_TRUE(c->PumpUntil([&] { return !c->open(); }, 10s));
  server_.reset();
  work.reset();
  for (auto& t : threads) t.join();
}

TEST_F(H2Server, CallsInFlightPerConnectionAreBounded) {
  Start({.max_calls_in_flight = 4});
  auto client = Connect();
  std::vector<int32_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(client->Submit("/test.Echo/Never", GrpcFramed("x")));
  ASSERT_TRUE(client->PumpUntil(
      [&] { return client->call(ids[4])->closed && client->call(ids[5])->closed; }, 10s));
  EXPECT_EQ(client->call(ids[4])->GrpcStatus(), 8);
  EXPECT_EQ(client->call(ids[5])->GrpcStatus(), 8);
  EXPECT_FALSE(client->call(ids[0])->closed);
  // Resetting the held streams does not free their slots: the handlers still have them.
  for (int i = 0; i < 4; ++i) client->Reset(ids[static_cast<std::size_t>(i)]);
  const int32_t after = client->Submit("/test.Echo/Never", GrpcFramed("x"));
  ASSERT_TRUE(client->PumpUntil([&] { return client->call(after)->closed; }, 10s));
  EXPECT_EQ(client->call(after)->GrpcStatus(), 8);
}

TEST_F(H2Server, StreamingMethodAnswersEachMessage) {
  Start();
  const H2Call c = Call("/test.Echo/Stream", GrpcFramed("a") + GrpcFramed("bc"));
  EXPECT_EQ(c.GrpcStatus(), 0);
  EXPECT_EQ(c.data, GrpcFramed("echo:a") + GrpcFramed("echo:bc"));
  // Replies come before the client half-closes.
  auto client = Connect();
  const int32_t id = client->Submit("/test.Echo/Stream", GrpcFramed("q"), {}, /*end_stream=*/false);
  ASSERT_TRUE(
      client->PumpUntil([&] { return client->call(id)->data == GrpcFramed("echo:q"); }, 10s));
  EXPECT_FALSE(client->call(id)->closed);
}

TEST_F(H2Server, GarbageClosesTheConnection) {
  // A handshake timeout longer than the test waits: only the protocol error closes.
  Start({.handshake_timeout = 60s});
  {
    std::string error;
    auto client = H2Client::Connect("127.0.0.1", server_->port(), error);
    ASSERT_TRUE(client);
    // HTTP/1.1 instead of the HTTP/2 preface (nghttp2 has queued its own preface, which
    // goes after: the server sees "GET / ..." first).
    int fd = client->fd();
    ASSERT_GT(::send(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, MSG_NOSIGNAL), 0);
    EXPECT_TRUE(client->PumpUntil([&] { return !client->open(); }, 10s));
  }
  {
    // A valid preface, then a GOAWAY frame on a stream (a protocol error).
    auto client = Connect();
    ASSERT_TRUE(client->Pump(10ms));
    client->SendRaw(std::string("\x00\x00\x08\x07\x00\x00\x00\x00\x05garbage!", 17));
    EXPECT_TRUE(client->PumpUntil([&] { return !client->open(); }, 10s));
  }
  ExpectServing();
}

TEST_F(H2Server, HeaderListLargerThanTheLimitIsRefused) {
  Start({.max_header_list_bytes = 4096});
  auto client = Connect();
  const int32_t id =
      client->Submit("/test.Echo/Unary", GrpcFramed("x"), {{"x-big", std::string(6000, 'h')}});
  client->PumpUntil([&] { return !client->open() || client->call(id)->closed; }, 10s);
  const H2Call* c = client->call(id);
  EXPECT_TRUE(!client->open() || (c->closed && c->GrpcStatus() != 0));
  ExpectServing();
}

TEST_F(H2Server, SlowRequestsAndSilentConnectionsAreCutOff) {
  Start({.handshake_timeout = 300ms, .read_timeout = 300ms, .idle_timeout = 500ms});
  // A request that never ends: DEADLINE_EXCEEDED, then the stream is reset.
  auto client = Connect();
  const int32_t id = client->Submit("/test.Echo/Unary", GrpcFramed("x").substr(0, 3), {}, false);
  ASSERT_TRUE(client->PumpUntil([&] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(id)->GrpcStatus(), 4);
  EXPECT_EQ(client->call(id)->GrpcMessage(), "request not received within 300 ms");
  // Then the connection has nothing open: idle, GOAWAY, closed.
  EXPECT_TRUE(client->PumpUntil([&] { return !client->open(); }, 10s));
  EXPECT_TRUE(client->goaway_received());
  // A TCP connection that never sends the preface (only reads the server's SETTINGS)
  // is closed.
  std::string error;
  auto silent = H2Client::Connect("127.0.0.1", server_->port(), error);
  ASSERT_TRUE(silent);
  bool closed = false;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!closed && std::chrono::steady_clock::now() < until) {
    pollfd p{silent->fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    closed = ::recv(silent->fd(), buf, sizeof buf, 0) <= 0;
  }
  EXPECT_TRUE(closed);
}

TEST_F(H2Server, AClientThatStopsReadingIsDisconnected) {
  Start({.write_timeout = 300ms});
  auto stalled = Connect();
  ASSERT_TRUE(stalled->Pump(10ms));
  stalled->set_reading(false);
  // 64 MiB of answers: far more than the socket buffers hold.
  for (int i = 0; i < 64; ++i) stalled->Submit("/test.Echo/Big", GrpcFramed("1048576"));
  for (int i = 0; i < 20; ++i) stalled->Pump(5ms);
  // Meanwhile another client on the same server thread is served.
  ExpectServing();
  std::this_thread::sleep_for(1s);
  ExpectServing();
  // The stalled client finds its connection closed once it reads again.
  stalled->set_reading(true);
  EXPECT_TRUE(stalled->PumpUntil([&] { return !stalled->open(); }, 20s));
  std::size_t done = 0;
  for (int32_t id = 1; id < 128; id += 2)
    if (stalled->call(id) != nullptr && stalled->call(id)->GrpcStatus() == 0) ++done;
  EXPECT_LT(done, 64u);
}

TEST_F(H2Server, AsyncCallSendsFromAnotherThreadArriveInOrder) {
  Start();
  auto client = Connect();
  auto [id, call] = OpenCall(*client, GrpcFramed("hi"));
  std::string expected = GrpcFramed("echo:hi");
  for (int i = 0; i < 1000; ++i) expected += GrpcFramed(std::to_string(i));
  std::thread sender([call = call] {
    for (int i = 0; i < 1000; ++i) call->writer.Send(std::to_string(i));
    call->writer.Finish({});
  });
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 10s));
  sender.join();
  EXPECT_EQ(client->call(id)->GrpcStatus(), 0);
  EXPECT_EQ(client->call(id)->data, expected);
  ExpectClosedOnce(*call, client.get());
  std::lock_guard lock(call->mu);
  EXPECT_EQ(call->messages, std::vector<std::string>{"hi"});
}

// Replies after the client half-closed, from a timer on another thread.
TEST_F(H2Server, AsyncCallMessagesSentAfterADelayArrive) {
  Start();
  auto client = Connect();
  const auto t0 = std::chrono::steady_clock::now();
  auto [id, call] = OpenCall(*client, GrpcFramed("a"), /*end_stream=*/true);
  boost::asio::io_context io;
  boost::asio::steady_timer first(io, 100ms), second(io, 200ms);
  first.async_wait([call = call](boost::system::error_code) { call->writer.Send("late"); });
  second.async_wait([call = call](boost::system::error_code) {
    call->writer.Send("later");
    call->writer.Finish({});
  });
  std::thread timers([&io] { io.run(); });
  H2Call* c = client->call(id);
  ASSERT_TRUE(
      client->PumpUntil([&] { return c->data == GrpcFramed("echo:a") + GrpcFramed("late"); }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_FALSE(c->closed);
  EXPECT_TRUE(call->half_closed);
  ASSERT_TRUE(client->PumpUntil([&] { return c->closed; }, 10s));
  timers.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_EQ(c->GrpcStatus(), 0);
  EXPECT_EQ(c->data, GrpcFramed("echo:a") + GrpcFramed("late") + GrpcFramed("later"));
  ExpectClosedOnce(*call, client.get());
}

// Finish ends the call with its status after the messages queued before it; what comes
// after (Sends, a second Finish) is dropped, from another thread or inside OnMessage.
TEST_F(H2Server, AsyncCallFinishEndsAfterQueuedMessagesAndLaterSendsAreDropped) {
  Start();
  auto client = Connect();
  auto [id, call] = OpenCall(*client);
  std::thread sender([call = call] {
    call->writer.Send("a");
    call->writer.Send("b");
    call->writer.Finish({GrpcCode::kNotFound, "gone"});
    call->writer.Send("c");
    call->writer.Finish({});
  });
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 10s));
  sender.join();
  EXPECT_EQ(client->call(id)->data, GrpcFramed("a") + GrpcFramed("b"));
  EXPECT_EQ(client->call(id)->GrpcStatus(), 5);
  EXPECT_EQ(client->call(id)->GrpcMessage(), "gone");
  ExpectClosedOnce(*call, client.get());
  call->writer.Send("after the end");  // dropped, on a stream that is gone

  // Longer than a string holds inline: the request buffer is on the heap.
  const std::string finish = "finish, inside OnMessage";
  auto [inside, finished] = OpenCall(*client, GrpcFramed(finish));
  ASSERT_TRUE(client->PumpUntil([&, id = inside] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(inside)->data, GrpcFramed("bye"));
  EXPECT_EQ(client->call(inside)->GrpcStatus(), 5);
  EXPECT_EQ(client->call(inside)->GrpcMessage(), "finished");
  ExpectClosedOnce(*finished, client.get());
  std::lock_guard lock(finished->mu);
  EXPECT_EQ(finished->messages, std::vector<std::string>{finish});
}

TEST_F(H2Server, AsyncCallFailedMessageEndsTheCallWithItsStatus) {
  Start();
  auto client = Connect();
  auto [id, call] = OpenCall(*client, GrpcFramed("x") + GrpcFramed("fail") + GrpcFramed("y"));
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(id)->data, GrpcFramed("echo:x"));
  EXPECT_EQ(client->call(id)->GrpcStatus(), 3);
  EXPECT_EQ(client->call(id)->GrpcMessage(), "asked to fail");
  ExpectClosedOnce(*call, client.get());
  std::lock_guard lock(call->mu);
  EXPECT_EQ(call->messages, std::vector<std::string>{"x"});  // not "y": the call had ended
}

TEST_F(H2Server, AsyncCallClosesOnceOnClientResetAndOnConnectionClose) {
  Start();
  auto client = Connect();
  auto [id, reset] = OpenCall(*client, GrpcFramed("r"));
  auto [other, closed] = OpenCall(*client);
  client->Reset(id);
  ExpectClosedOnce(*reset, client.get());
  reset->writer.Send("dropped");
  reset->writer.Finish({});
  EXPECT_EQ(closed->closes, 0);  // the connection's other call goes on
  closed->writer.Send("still open");
  ASSERT_TRUE(client->PumpUntil(
      [&, id = other] { return client->call(id)->data == GrpcFramed("still open"); }, 10s));
  client.reset();  // the connection closes
  ExpectClosedOnce(*closed);
  closed->writer.Send("dropped");  // its connection is closed, and still there
  ExpectServing();
}

// Drain ends an open call UNAVAILABLE after what it queued: the client goes elsewhere.
TEST_F(H2Server, AsyncCallEndsUnavailableOnDrain) {
  Start();
  auto client = Connect();
  auto [id, call] = OpenCall(*client, GrpcFramed("d"));
  call->writer.Send("before the drain");
  server_->Drain();
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(id)->data, GrpcFramed("echo:d") + GrpcFramed("before the drain"));
  EXPECT_EQ(client->call(id)->GrpcStatus(), 14);
  EXPECT_EQ(client->call(id)->GrpcMessage(), "the server is shutting down");
  ExpectClosedOnce(*call, client.get());
  EXPECT_TRUE(client->PumpUntil([&] { return !client->open(); }, 10s));
}

// Stop ends the open calls (their states hold their writers, and so their connections:
// without it neither would ever be freed).
TEST_F(H2Server, AsyncCallClosesOnceOnStop) {
  Start();
  auto client = Connect();
  auto [id, call] = OpenCall(*client, GrpcFramed("s"));
  server_->Stop();
  EXPECT_EQ(call->closes, 1);
  call->writer.Send("dropped");
  EXPECT_TRUE(client->PumpUntil([&] { return !client->open(); }, 10s));
}

// A streaming call that has had a message is not expired by read_timeout; its
// grpc-timeout still applies.
TEST_F(H2Server, AsyncCallOutlivesTheReadTimeoutButNotItsDeadline) {
  Start({.read_timeout = 100ms});
  auto client = Connect();
  auto [id, call] = OpenCall(*client, GrpcFramed("m"));
  const int32_t timed = client->Submit("/test.Echo/Calls", GrpcFramed("t"),
                                       {{"grpc-timeout", "500m"}}, /*end_stream=*/false);
  ASSERT_TRUE(client->PumpUntil([&] { return client->call(timed)->closed; }, 10s));
  EXPECT_EQ(client->call(timed)->GrpcStatus(), 4);
  EXPECT_FALSE(client->call(id)->closed);
  EXPECT_EQ(call->closes, 0);
  std::shared_ptr<RecordingCall> expired;
  {
    std::lock_guard lock(mu_);
    expired = calls_.back();
  }
  ExpectClosedOnce(*expired, client.get());
}

// A client that stops reading: what the call queues beyond max_stream_queued_bytes ends
// it RESOURCE_EXHAUSTED, and the queue is freed; the status arrives once it reads again.
TEST_F(H2Server, AsyncCallToAClientThatDoesNotReadIsBounded) {
  Start({.write_timeout = 60s});
  auto client = Connect();
  auto [id, call] = OpenCall(*client);
  client->set_reading(false);
  std::thread sender([call = call] {
    const std::string chunk(64 << 10, 'q');
    // Far more than the socket buffers and the bound hold.
    for (int i = 0; i < 4096 && call->closes == 0; ++i) {
      call->writer.Send(chunk);
      std::this_thread::sleep_for(500us);
    }
  });
  sender.join();
  EXPECT_EQ(call->closes, 1);
  // At most the rest of the message HTTP/2 had begun to send is kept (a message cut short
  // would break the call's framing).
  EXPECT_LE(server_->queued_bytes(), (64u << 10) + 5);
  call->writer.Send("dropped");
  client->set_reading(true);
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 20s));
  const H2Call* c = client->call(id);
  EXPECT_EQ(c->GrpcStatus(), 8);
  EXPECT_EQ(c->GrpcMessage(), "more than 1048576 response bytes queued on this call");
  EXPECT_EQ(c->data.size() % ((64 << 10) + 5), 0u);
  EXPECT_EQ(server_->queued_bytes(), 0u);
  ExpectServing();
}

// Calls whose clients do not read, each under its own bound: what they queue together is
// bounded for the server (max_server_queued_bytes); the Send that would go over ends its
// call RESOURCE_EXHAUSTED, and the other call goes on.
TEST_F(H2Server, QueuedResponseBytesAreBoundedPerServer) {
  Start({.max_server_queued_bytes = 512 << 10, .write_timeout = 60s});
  auto client = Connect();
  auto [first_id, first] = OpenCall(*client);
  auto [second_id, second] = OpenCall(*client);
  client->set_reading(false);
  const std::string chunk(64 << 10, 'q');
  // The first call queues about half the server's bound (HTTP/2 takes the first window).
  for (int i = 0; i < 200 && server_->queued_bytes() < (256u << 10); ++i) {
    first->writer.Send(chunk);
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_GE(server_->queued_bytes(), 256u << 10);
  // The second call goes over the server's bound long before its own (1 MiB).
  for (int i = 0; i < 16 && second->closes == 0; ++i) {
    second->writer.Send(chunk);
    std::this_thread::sleep_for(2ms);
  }
  ExpectClosedOnce(*second);
  EXPECT_EQ(first->closes, 0);
  EXPECT_LE(server_->queued_bytes(), (512u << 10) + (64u << 10) + 5);
  client->set_reading(true);
  ASSERT_TRUE(client->PumpUntil([&, id = second_id] { return client->call(id)->closed; }, 20s));
  EXPECT_EQ(client->call(second_id)->GrpcStatus(), 8);
  EXPECT_EQ(client->call(second_id)->GrpcMessage(),
            "more than 524288 response bytes queued on this server");
  EXPECT_FALSE(client->call(first_id)->closed);
  ExpectServing();
}

// A call whose queued replies do not move for stalled_reply_timeout is reset and its queue
// freed, whatever the bounds; a call with nothing queued stays open however long it waits.
TEST_F(H2Server, ACallWhoseRepliesDoNotMoveIsReset) {
  Start({.stalled_reply_timeout = 500ms, .write_timeout = 60s});
  auto quiet = Connect();
  auto [quiet_id, quiet_call] = OpenCall(*quiet, GrpcFramed("hello"));  // echoed: nothing queued
  auto client = Connect();
  auto [id, call] = OpenCall(*client);
  client->set_reading(false);
  const std::string chunk(64 << 10, 'q');
  for (int i = 0; i < 200 && server_->queued_bytes() == 0; ++i) {
    call->writer.Send(chunk);
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_GT(server_->queued_bytes(), 0u);
  const auto stalled = std::chrono::steady_clock::now();
  ExpectClosedOnce(*call);
  EXPECT_GE(std::chrono::steady_clock::now() - stalled, 400ms);
  EXPECT_EQ(server_->queued_bytes(), 0u);
  quiet->PumpUntil([] { return false; }, 1s);
  EXPECT_EQ(quiet_call->closes, 0);
  EXPECT_FALSE(quiet->call(quiet_id)->closed);
  client->set_reading(true);
  ASSERT_TRUE(client->PumpUntil([&, id = id] { return client->call(id)->closed; }, 10s));
  EXPECT_EQ(client->call(id)->reset_code, 8u);  // CANCEL
  ExpectServing();
}

}  // namespace
}  // namespace sluiced
