#include "store/wakeups.h"

namespace sluice::internal {

Wakeups::Handle Wakeups::Watch(const std::string& channel, std::function<void()> wake) {
  uint64_t id = 0;
  {
    MutexLock lock(mu_);
    if (count_ >= max_watches_) return nullptr;
    id = ++next_id_;
    ++count_;
    auto& watchers = channels_[channel];
    watchers.emplace(id, std::move(wake));
    if (watchers.size() == 1 && on_first_) on_first_(channel);
  }
  // The handle keeps this registry alive only weakly: a registry torn down first (its
  // store shut down) leaves handles that unregister nothing.
  // Not null (a null handle says "past the bound"); the deleter frees nothing.
  return std::shared_ptr<void>(static_cast<void*>(this),
                               [weak = weak_from_this(), channel, id](void*) {
                                 if (auto self = weak.lock()) self->Unwatch(channel, id);
                               });
}

void Wakeups::Unwatch(const std::string& channel, uint64_t id) {
  MutexLock lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second.erase(id) == 0) return;
  --count_;
  if (it->second.empty()) {
    channels_.erase(it);
    if (on_last_) on_last_(channel);
  }
}

void Wakeups::Notify(std::string_view channel) {
  std::vector<std::function<void()>> wakes;
  {
    MutexLock lock(mu_);
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    for (const auto& [id, wake] : it->second) wakes.push_back(wake);
  }
  for (const auto& wake : wakes) wake();
}

std::vector<std::string> Wakeups::Channels() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  out.reserve(channels_.size());
  for (const auto& [channel, watchers] : channels_) out.push_back(channel);
  return out;
}

std::size_t Wakeups::watches() const {
  MutexLock lock(mu_);
  return count_;
}

}  // namespace sluice::internal
