// h2_load: a load generator for sluiced's ShouldRateLimit (bench/service.sh) on the lean
// HTTP/2 client (bench/h2_client.h): one thread, --connections connections, each call for
// one of --ids distinct ids (requests serialized once, up front), for --seconds. Closed
// loop by default (--concurrency calls in flight in all); with --rate, open loop: calls
// start on a fixed schedule (at most --concurrency in flight; calls the schedule could not
// start are counted as unsent) and latency counts from each call's scheduled start, so a
// server that falls behind is not hidden. Prints checks/s and latency percentiles in
// grpc_load's format. It costs a fraction of a grpc++ client's CPU, so on a shared box
// the figure measures sluiced rather than the client.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "service/bench/h2_client.h"
#include "service/bench/load_report.h"

namespace rls = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;
using sluiced::bench::H2Call;
using sluiced::bench::H2Client;

namespace {

const std::string kPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// RateLimitResponse.overall_code (field 1, a varint, serialized first): 1 OK, 2 OVER_LIMIT.
int OverallCode(const std::string& message) {
  if (message.size() < 2 || message[0] != 0x08) return 0;
  return static_cast<unsigned char>(message[1]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"h2_load: closed-loop load on ShouldRateLimit over a lean HTTP/2 client"};
  sluiced::bench::LoadOptions o;
  std::string grpc_timeout;
  double rate = 0;
  sluiced::bench::AddLoadOptions(app, o);
  app.add_option("--rate", rate, "calls per second, open loop (0: closed loop)");
  app.add_option("--grpc-timeout", grpc_timeout, "grpc-timeout header to send (e.g. 20m)");
  CLI11_PARSE(app, argc, argv);
  const std::string& target = o.target;
  const std::string& domain = o.domain;
  const int concurrency = o.concurrency, connections = o.connections, ids = o.ids;
  const double seconds = o.seconds;
  const auto colon = target.rfind(':');
  if (colon == std::string::npos || connections < 1 || concurrency < 1 || ids < 1) {
    std::fprintf(stderr, "h2_load: bad --target, --connections, --concurrency or --ids\n");
    return 2;
  }
  std::vector<std::string> bodies;
  for (int i = 0; i < ids; ++i) {
    rls::RateLimitRequest request;
    request.set_domain(domain);
    auto* e = request.add_descriptors()->add_entries();
    e->set_key("user");
    e->set_value("u" + std::to_string(i));
    const std::string m = request.SerializeAsString();
    const auto n = static_cast<uint32_t>(m.size());
    std::string framed = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
    bodies.push_back(framed + m);
  }
  std::vector<std::pair<std::string, std::string>> extra;
  if (!grpc_timeout.empty()) extra.emplace_back("grpc-timeout", grpc_timeout);

  std::vector<std::unique_ptr<H2Client>> clients;
  for (int c = 0; c < connections; ++c) {
    std::string error;
    auto client =
        H2Client::Connect(target.substr(0, colon), std::stoi(target.substr(colon + 1)), error);
    if (!client) {
      std::fprintf(stderr, "h2_load: cannot connect to %s: %s\n", target.c_str(), error.c_str());
      return 1;
    }
    clients.push_back(std::move(client));
  }
  // refused: calls the server refused unprocessed (REFUSED_STREAM, after its GOAWAY):
  // safe to retry elsewhere, not errors.
  // lost: calls sent and never answered (their connection closed, or the wait ran out).
  uint64_t ok = 0, over = 0, errors = 0, refused = 0, lost = 0;
  std::string first_error;
  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 20);
  std::mt19937_64 rng(1234);
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  bool running = true;
  auto submit = [&](H2Client& client) {
    client.Submit(kPath, bodies[rng() % bodies.size()], extra);
  };
  for (auto& client : clients) {
    H2Client* c = client.get();
    c->on_close = [&, c](H2Call& call) {
      latencies_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - call.started).count());
      const int code = call.GrpcStatus() == 0 ? OverallCode(call.Message()) : 0;
      if (code == 1) {
        ++ok;
      } else if (code == 2) {
        ++over;
      } else if (call.reset_code == 7) {  // NGHTTP2_REFUSED_STREAM
        ++refused;
      } else {
        ++errors;
        if (first_error.empty())
          first_error = "grpc-status " + std::to_string(call.GrpcStatus()) + " " +
                        call.GrpcMessage() + " rst " + std::to_string(call.reset_code);
      }
      // After a GOAWAY (the server stops gracefully) no new call goes to it.
      if (running && rate <= 0 && !c->goaway_received()) submit(*c);
    };
  }
  uint64_t scheduled = 0, unsent = 0;
  std::size_t next_client = 0;
  if (rate <= 0) {
    for (int i = 0; i < concurrency; ++i)
      submit(*clients[static_cast<std::size_t>(i % connections)]);
  }
  // Open loop: start the calls whose scheduled time has come (latency counts from it).
  auto start_due = [&](Clock::time_point now) {
    const auto due =
        static_cast<uint64_t>(std::chrono::duration<double>(now - start).count() * rate);
    std::size_t in_flight = 0;
    for (auto& c : clients) in_flight += c->open_calls();
    for (; scheduled < due; ++scheduled) {
      if (in_flight >= static_cast<std::size_t>(concurrency)) {
        ++unsent;
        continue;
      }
      H2Client& c = *clients[next_client++ % clients.size()];
      const int32_t id = c.Submit(kPath, bodies[rng() % bodies.size()], extra);
      if (id > 0)
        c.call(id)->started =
            start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(static_cast<double>(scheduled) / rate));
      ++in_flight;
    }
  };
  std::vector<pollfd> fds(clients.size());
  while (true) {
    const auto now = Clock::now();
    if (running && now >= end) running = false;
    if (running && rate > 0) start_due(now);
    std::size_t open = 0, connected = 0;
    for (auto& c : clients) {
      open += c->open() ? c->open_calls() : 0;
      connected += c->open() ? 1 : 0;
    }
    if (connected == 0 || (!running && (open == 0 || now >= end + std::chrono::seconds(5)))) break;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (!clients[i]->open()) {
        fds[i] = {-1, 0, 0};
        continue;
      }
      clients[i]->Flush();
      fds[i] = {clients[i]->fd(),
                static_cast<short>(POLLIN | (clients[i]->WantsWrite() ? POLLOUT : 0)), 0};
    }
    // Open loop: wake at least every 100 us to keep the schedule.
    const timespec wait{0, rate > 0 ? 100'000 : 50'000'000};
    if (::ppoll(fds.data(), fds.size(), &wait, nullptr) < 0) break;
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !clients[i]->OnReadable()) {
        if (clients[i]->goaway_received() && clients[i]->open_calls() == 0)
          continue;  // closed after its GOAWAY with every call answered
        // Calls sent and never answered: counted (a stop under load must show none).
        lost += clients[i]->open_calls();
        std::fprintf(stderr, "h2_load: connection %zu closed with %zu call(s) open\n", i,
                     clients[i]->open_calls());
      }
    }
  }
  // Calls still open when the wait for them ran out were never answered either.
  for (auto& c : clients) lost += c->open() ? c->open_calls() : 0;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  sluiced::bench::PrintLoadReport(ok, over, errors, elapsed, latencies_us,
                                  " unsent=" + std::to_string(unsent) + " refused=" +
                                      std::to_string(refused) + " lost=" + std::to_string(lost));
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  return errors > 0 || lost > 0 ? 1 : 0;
}
