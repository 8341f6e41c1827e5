// QuotaShares: a rate shared among a bucket's clients (sluice/quota.h), on the client's
// store (src/algo/quota_shares.lua on Redis, its twin on the embedded store).
#include "sluice/quota.h"

#include <utility>

#include "algo/quota_shares.h"
#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"

namespace sluice {

QuotaShares::QuotaShares(std::shared_ptr<internal::ClientCore> core, std::string name)
    : core_(std::move(core)),
      name_(std::move(name)),
      key_head_(internal::KeyHead(core_->options.prefix, name_)) {}

StatusOr<QuotaShares> Client::MakeQuotaShares(std::string_view name) const {
  if (Status s = internal::ValidateName("quota shares name", name); !s.ok()) return s;
  return QuotaShares(core_, std::string(name));
}

StatusOr<std::string> QuotaShares::KeyFor(std::string_view id) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  return internal::MakeQuotaKey(key_head_, id);
}

void QuotaShares::Assign(const QuotaShareRequest& request,
                         std::function<void(StatusOr<QuotaShareGrant>)> done) const {
  internal::CallNeverInline<StatusOr<QuotaShareGrant>>(
      core_, std::move(done), [&](std::function<void(StatusOr<QuotaShareGrant>)> then) {
        internal::QuotaCall call;
        StatusOr<std::string> key = KeyFor(request.id);
        if (!key.ok()) return then(key.status());
        call.key = *std::move(key);
        call.index_key = internal::MakeQuotaIndexKey(key_head_, request.id);
        call.args = {.client = request.client,
                     .demand_milli = request.demand_milli,
                     .rate_milli = request.rate_milli,
                     .hold_ms = request.hold.count(),
                     .headroom_percent = request.headroom_percent,
                     .release = request.release};
        if (Status s = internal::ValidateQuotaShareArgs(call.args); !s.ok()) return then(s);
        if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
        call.deadline = std::chrono::steady_clock::now() + core_->options.deadline;
        // Keeps the store alive until AssignQuota returns: `then` may run on an I/O
        // thread before that and drop the last reference to this client.
        const std::shared_ptr<internal::ClientCore> core = core_;
        core->store->AssignQuota(std::move(call),
                                 [then = std::move(then)](StatusOr<internal::QuotaShareReply> r) {
                                   if (!r.ok()) return then(r.status());
                                   then(QuotaShareGrant{.grant_milli = r->grant_milli,
                                                        .total_demand_milli = r->total_demand_milli,
                                                        .clients = r->clients,
                                                        .assigned_milli = r->assigned_milli,
                                                        .full = r->full});
                                 });
      });
}

StatusOr<QuotaShareGrant> QuotaShares::AssignSync(const QuotaShareRequest& request) const {
  return internal::WaitFor<StatusOr<QuotaShareGrant>>(
      [&](std::function<void(StatusOr<QuotaShareGrant>)> done) {
        Assign(request, std::move(done));
      });
}

}  // namespace sluice
