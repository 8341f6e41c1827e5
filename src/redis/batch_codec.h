// The wire form of the batch script (src/algo/batch.lua, docs/design.md §7): how the
// calls of one batch are written as its arguments, and how its one flat reply is read
// back call by call. Plain data in, plain data out: no connection, no socket
// (redis/connection.h sends the batch and runs the callbacks).
//
// The functions a call names, their indices and arities, are those of the batch manifest
// (cmake/batch_manifest.cmake, generated/batch_manifest.h), as are the script's tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <hiredis/hiredis.h>

namespace sluice::internal {

// The bulk items of a call's arguments as AppendBulk wrote them ("$<len>\r\n<bytes>\r\n"
// each), header included, into `items`; how many, or 0 when there are more than `max`
// or the text is not such items.
std::size_t SplitBulks(std::string_view tail, std::string_view* items, std::size_t max);

// The functions whose calls may reuse arguments: a marker ('<f>/', '<f>/<k>') carries the
// function's index as one digit (as the script reads every index).
inline constexpr int kMaxReusingFunctions = 10;

// One call of a batch: function `function` of the batch script on `key`, with `args`
// (arg_items RESP bulks, what its own script takes as ARGV), and how it is sent.
struct BatchCall {
  int function = 0;
  std::string_view key;
  std::string_view args;
  int arg_items = 0;
  // Set by PlanArgumentReuse: -1, the function and all its arguments; 0, '<f>/' (all the
  // arguments of the last call of its function before it); k >= 1, '<f>/<k>' and `own`,
  // its argument k as encoded in `args` (all the others that call's).
  int reuse = -1;
  std::string_view own;
};

// Plans which of `n` calls reuse the arguments of the last call of their function before
// them in the batch (src/algo/batch.lua): all of them, or all but one (never the clock,
// argument 2, and only where that is fewer items). The calls of one limiter with one cost
// send their parameters once, and so do a concurrency limiter's acquires, which differ in
// their token only, however the calls of several limiters interleave. Returns how many
// calls reuse arguments.
std::size_t PlanArgumentReuse(BatchCall* calls, std::size_t n);

// How many items the batch script call of `n` planned calls has: the command and the
// script (2), then what AppendBatchArguments writes.
uint64_t BatchItems(const BatchCall* calls, std::size_t n, bool undeclared);

// Writes what follows the script in the batch script call: numkeys n and key_1 .. key_n
// or, `undeclared`, 0, n and the keys as arguments (a Redis Cluster primary runs such a
// batch over keys of any slot it serves); then per call its function and arguments, or
// its marker (and its one argument), as planned.
void AppendBatchArguments(std::string& out, const BatchCall* calls, std::size_t n, bool undeclared);

// Reads the batch script's one flat reply (src/algo/batch.lua), call by call. Per call:
// an error reply; a code (0, 1, 2 or 3) and the 3 items after it, a decision's 4; -2 - w and
// then w items; or -1 and then one value. (Flat, not an array per call: Redis makes a
// nested table into a reply at about ten times the cost, and hiredis makes one object
// per element.) A call's items are handed out as an array of its own, a view into the
// batch's reply, which must outlive the reader.
class BatchReplyReader {
 public:
  explicit BatchReplyReader(const redisReply& reply);

  // The next call's reply: its error reply, its array (valid until the next call of
  // Next) or its one value; null when the items ran out or do not follow the layout
  // (none is guessed at: the calls from there on have no reply).
  const redisReply* Next();
  // Whether every item of the reply has been read.
  bool AtEnd() const { return at_ == total_; }
  // Whether a call's reply read so far was a READONLY error (the server is no longer a
  // primary).
  bool readonly() const { return readonly_; }

 private:
  const redisReply& reply_;
  std::size_t total_;
  std::size_t at_ = 0;
  bool readonly_ = false;
  redisReply view_{};  // the array handed out last
};

// Whether an error reply says the server is a replica now (READONLY).
bool IsReadOnlyError(std::string_view error);

}  // namespace sluice::internal
