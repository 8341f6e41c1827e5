#include "redis/batch_codec.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <utility>

#include "generated/batch_manifest.h"
#include "redis/resp.h"

namespace sluice::internal {

size_t SplitBulks(std::string_view tail, std::string_view* items, size_t max) {
  size_t count = 0;
  while (!tail.empty()) {
    if (count == max || tail[0] != '$') return 0;
    const size_t eol = tail.find("\r\n");
    if (eol == std::string_view::npos) return 0;
    size_t len = 0;
    const auto [end, ec] = std::from_chars(tail.data() + 1, tail.data() + eol, len);
    if (ec != std::errc() || end != tail.data() + eol) return 0;
    const size_t whole = eol + 2 + len + 2;
    if (whole > tail.size()) return 0;
    items[count++] = tail.substr(0, whole);
    tail.remove_prefix(whole);
  }
  return count;
}

namespace {

// The arguments one batch function takes at most.
constexpr size_t kMaxArguments = batch_manifest::kMaxArity;
static_assert(batch_manifest::kFunctionCount <= kMaxReusingFunctions,
              "src/algo/batch.lua reads a function's index as one digit");

// Which one argument of `call` differs from `last`'s (from 1), or -1 when none or more
// than one does or they cannot be compared; that argument, as encoded, in `own`.
int OneDiffers(const BatchCall& call, const BatchCall& last, std::string_view& own) {
  std::string_view mine[kMaxArguments], theirs[kMaxArguments];
  const size_t m = SplitBulks(call.args, mine, kMaxArguments);
  if (m == 0 || SplitBulks(last.args, theirs, kMaxArguments) != m) return -1;
  int differs = 0;
  for (size_t x = 0; x < m; ++x) {
    if (mine[x] == theirs[x]) continue;
    if (differs != 0) return -1;
    differs = static_cast<int>(x) + 1;
  }
  if (differs == 0) return -1;
  own = mine[differs - 1];
  return differs;
}

}  // namespace

size_t PlanArgumentReuse(BatchCall* calls, size_t n) {
  int last_of[kMaxReusingFunctions];
  std::fill(std::begin(last_of), std::end(last_of), -1);
  size_t shared = 0;
  for (size_t i = 0; i < n; ++i) {
    BatchCall& call = calls[i];
    call.reuse = -1;
    if (call.function < 0 || call.function >= kMaxReusingFunctions) continue;
    const int before = std::exchange(last_of[call.function], static_cast<int>(i));
    if (before < 0) continue;
    const BatchCall& last = calls[before];
    if (call.args == last.args) {
      call.reuse = 0;
    } else if (call.arg_items > 1 && call.arg_items == last.arg_items) {
      // Never the clock (argument 2): "" asks for the batch's TIME, a number is the model
      // clock, and the script reads it as each call sends it.
      const int k = OneDiffers(call, last, call.own);
      if (k > 0 && k != 2) call.reuse = k;
    }
    if (call.reuse >= 0) ++shared;
  }
  return shared;
}

uint64_t BatchItems(const BatchCall* calls, size_t n, bool undeclared) {
  uint64_t items = 3 + n + (undeclared ? 1 : 0);
  for (size_t i = 0; i < n; ++i) {
    const int reuse = calls[i].reuse;
    items += reuse < 0 ? 1 + static_cast<uint64_t>(calls[i].arg_items) : reuse == 0 ? 1 : 2;
  }
  return items;
}

void AppendBatchArguments(std::string& out, const BatchCall* calls, size_t n, bool undeclared) {
  if (undeclared) AppendBulk(out, int64_t{0});
  AppendBulk(out, static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) AppendBulk(out, calls[i].key);
  for (size_t i = 0; i < n; ++i) {
    const BatchCall& call = calls[i];
    if (call.reuse < 0) {
      AppendBulk(out, static_cast<int64_t>(call.function));
      out += call.args;
      continue;
    }
    std::string marker = std::to_string(call.function) + "/";
    if (call.reuse == 0) {
      AppendBulk(out, marker);
      continue;
    }
    marker += std::to_string(call.reuse);
    AppendBulk(out, marker);
    out += call.own;  // already encoded
  }
}

BatchReplyReader::BatchReplyReader(const redisReply& reply)
    : reply_(reply), total_(reply.type == REDIS_REPLY_ARRAY ? reply.elements : 0) {}

const redisReply* BatchReplyReader::Next() {
  if (at_ >= total_) return nullptr;
  redisReply* head = reply_.element[at_];
  const size_t left = total_ - at_;
  const redisReply* own = nullptr;
  if (head->type == REDIS_REPLY_ERROR) {
    own = head;
    at_ += 1;
  } else if (head->type != REDIS_REPLY_INTEGER) {
    return nullptr;
  } else if (head->integer >= 0 && head->integer <= 3 && left >= 4) {
    view_ = redisReply{};
    view_.type = REDIS_REPLY_ARRAY;
    view_.elements = 4;
    view_.element = reply_.element + at_;
    own = &view_;
    at_ += 4;
  } else if (head->integer == -1 && left >= 2) {
    own = reply_.element[at_ + 1];
    at_ += 2;
  } else if (head->integer <= -2 && head->integer >= -1 - static_cast<long long>(left)) {
    view_ = redisReply{};
    view_.type = REDIS_REPLY_ARRAY;
    view_.elements = static_cast<size_t>(-2 - head->integer);
    view_.element = view_.elements > 0 ? reply_.element + at_ + 1 : nullptr;
    own = &view_;
    at_ += 1 + view_.elements;
  } else {
    return nullptr;
  }
  if (own->type == REDIS_REPLY_ERROR && IsReadOnlyError(std::string_view(own->str, own->len))) {
    readonly_ = true;
  }
  return own;
}

bool IsReadOnlyError(std::string_view error) {
  return error.starts_with("READONLY");
}

}  // namespace sluice::internal
