// grpc_load: a closed-loop load generator for sluiced's ShouldRateLimit (bench/service.sh).
// Keeps --concurrency calls in flight on --connections channels for --seconds, each call
// for one of --ids distinct ids, and prints checks/s and latency percentiles.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "service/bench/load_report.h"

namespace rls = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

struct Shared {
  Clock::time_point end;
  std::atomic<uint64_t> ok{0}, over{0}, errors{0};
  std::mutex mu;
  std::vector<double> latencies_us;
  std::atomic<int> running{0};
};

class Caller {
 public:
  Caller(rls::RateLimitService::Stub* stub, Shared* shared, std::string domain, int ids,
         uint64_t seed)
      : stub_(stub), shared_(shared), domain_(std::move(domain)), ids_(ids), rng_(seed) {
    latencies_.reserve(1 << 16);
  }
  void Start() {
    shared_->running.fetch_add(1);
    Next();
  }

 private:
  void Next() {
    if (Clock::now() >= shared_->end) {
      {
        std::lock_guard lock(shared_->mu);
        shared_->latencies_us.insert(shared_->latencies_us.end(), latencies_.begin(),
                                     latencies_.end());
      }
      shared_->running.fetch_sub(1);
      return;
    }
    request_.Clear();
    request_.set_domain(domain_);
    auto* e = request_.add_descriptors()->add_entries();
    e->set_key("user");
    e->set_value("u" + std::to_string(rng_() % static_cast<uint64_t>(ids_)));
    response_.Clear();
    context_ = std::make_unique<grpc::ClientContext>();
    context_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    start_ = Clock::now();
    stub_->async()->ShouldRateLimit(
        context_.get(), &request_, &response_, [this](grpc::Status status) {
          latencies_.push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - start_).count());
          if (!status.ok())
            shared_->errors.fetch_add(1);
          else if (response_.overall_code() == rls::RateLimitResponse::OK)
            shared_->ok.fetch_add(1);
          else
            shared_->over.fetch_add(1);
          Next();
        });
  }

  rls::RateLimitService::Stub* stub_;
  Shared* shared_;
  std::string domain_;
  int ids_;
  std::mt19937_64 rng_;
  rls::RateLimitRequest request_;
  rls::RateLimitResponse response_;
  std::unique_ptr<grpc::ClientContext> context_;
  Clock::time_point start_;
  std::vector<double> latencies_;
};

int main(int argc, char** argv) {
  CLI::App app{"grpc_load: closed-loop load on ShouldRateLimit"};
  sluiced::bench::LoadOptions o;
  sluiced::bench::AddLoadOptions(app, o);
  CLI11_PARSE(app, argc, argv);
  const std::string& target = o.target;
  const std::string& domain = o.domain;
  const int concurrency = o.concurrency, connections = o.connections, ids = o.ids;
  const double seconds = o.seconds;
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", c);  // distinct channels, distinct connections
    stubs.push_back(rls::RateLimitService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  Shared shared;
  const auto start = Clock::now();
  shared.end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::unique_ptr<Caller>> callers;
  for (int i = 0; i < concurrency; ++i) {
    callers.push_back(std::make_unique<Caller>(
        stubs[static_cast<std::size_t>(i % connections)].get(), &shared, domain, ids, 1234 + i));
  }
  for (auto& c : callers) c->Start();
  while (shared.running.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  sluiced::bench::PrintLoadReport(shared.ok, shared.over, shared.errors, elapsed,
                                  shared.latencies_us);
  return shared.errors > 0 ? 1 : 0;
}
