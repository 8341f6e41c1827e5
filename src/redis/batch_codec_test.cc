// The batch script's wire form (redis/batch_codec.h) on plain data: which calls reuse
// which arguments, the bytes of a batch, and every shape of the flat reply, read back.
#include "redis/batch_codec.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hiredis/read.h>

#include "generated/batch_manifest.h"
#include "redis/resp.h"
#include "redis/scripts.h"

namespace sluice::internal {
namespace {

// The RESP bulks of `args`, as a store writes a call's arguments.
std::string Bulks(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) AppendBulk(out, a);
  return out;
}

// A call of `function` on `key`; its arguments' text lives in `args`.
BatchCall Call(int function, std::string_view key, const std::string& args, int items) {
  return {.function = function, .key = key, .args = args, .arg_items = items};
}

// How each call is planned to go: -1, 0 or k.
std::vector<int> Plan(std::vector<BatchCall>& calls, size_t* shared = nullptr) {
  const size_t s = PlanArgumentReuse(calls.data(), calls.size());
  if (shared) *shared = s;
  std::vector<int> reuse;
  for (const BatchCall& c : calls) reuse.push_back(c.reuse);
  return reuse;
}

const std::string kFixed = Bulks({"0", "", "1", "10", "60000", "0", "0"});
const std::string kFixedCost2 = Bulks({"0", "", "2", "10", "60000", "0", "0"});
const std::string kFixedModelClock = Bulks({"0", "1700000000000", "1", "10", "60000", "0", "0"});
const std::string kFixedTwoDiffer = Bulks({"0", "", "2", "20", "60000", "0", "0"});
const std::string kAcquireA = Bulks({"0", "", "a", "5", "60000"});
const std::string kAcquireB = Bulks({"0", "", "b", "5", "60000"});

TEST(BatchCodec, SplitBulksReadsTheItemsAsWritten) {
  std::string_view items[8];
  ASSERT_EQ(SplitBulks(kAcquireA, items, 8), 5u);
  EXPECT_EQ(items[0], "$1\r\n0\r\n");
  EXPECT_EQ(items[1], "$0\r\n\r\n");
  EXPECT_EQ(items[4], "$5\r\n60000\r\n");
  EXPECT_EQ(SplitBulks(kAcquireA, items, 4), 0u);       // more than max
  EXPECT_EQ(SplitBulks(":1\r\n", items, 8), 0u);        // not a bulk
  EXPECT_EQ(SplitBulks("$5\r\nab\r\n", items, 8), 0u);  // shorter than its length
  EXPECT_EQ(SplitBulks("$x\r\nab\r\n", items, 8), 0u);  // no length
  EXPECT_EQ(SplitBulks("", items, 8), 0u);
}

TEST(BatchCodec, CallsOfOneFunctionWithTheSameArgumentsReuseThemAll) {
  std::vector<BatchCall> calls = {Call(0, "k1", kFixed, 7), Call(0, "k2", kFixed, 7),
                                  Call(0, "k3", kFixed, 7)};
  size_t shared = 0;
  EXPECT_EQ(Plan(calls, &shared), (std::vector<int>{-1, 0, 0}));
  EXPECT_EQ(shared, 2u);
}

TEST(BatchCodec, ACallThatDiffersInOneArgumentSendsThatOneOnly) {
  std::vector<BatchCall> calls = {Call(5, "c", kAcquireA, 5), Call(5, "c", kAcquireB, 5),
                                  Call(0, "f", kFixed, 7), Call(0, "f", kFixedCost2, 7)};
  EXPECT_EQ(Plan(calls), (std::vector<int>{-1, 3, -1, 3}));
  EXPECT_EQ(calls[1].own, "$1\r\nb\r\n");
  EXPECT_EQ(calls[3].own, "$1\r\n2\r\n");
}

TEST(BatchCodec, TheClockIsNeverTheArgumentReplacedNorAreTwo) {
  // Argument 2 differs (Redis TIME, then a model clock): k = 2 is refused by the script.
  std::vector<BatchCall> clock = {Call(0, "a", kFixed, 7), Call(0, "b", kFixedModelClock, 7)};
  EXPECT_EQ(Plan(clock), (std::vector<int>{-1, -1}));
  std::vector<BatchCall> two = {Call(0, "a", kFixed, 7), Call(0, "b", kFixedTwoDiffer, 7)};
  EXPECT_EQ(Plan(two), (std::vector<int>{-1, -1}));
  // One argument of one: '<f>/1' and it are no fewer items than the call in full.
  const std::string x = Bulks({"x"}), y = Bulks({"y"});
  std::vector<BatchCall> release = {Call(6, "l", x, 1), Call(6, "l", y, 1), Call(6, "m", y, 1)};
  EXPECT_EQ(Plan(release), (std::vector<int>{-1, -1, 0}));
}

TEST(BatchCodec, InterleavedFunctionsEachReuseTheirOwnLastCall) {
  std::vector<BatchCall> calls = {Call(0, "f1", kFixed, 7),      Call(5, "c", kAcquireA, 5),
                                  Call(0, "f2", kFixed, 7),      Call(5, "c", kAcquireB, 5),
                                  Call(0, "f3", kFixedCost2, 7), Call(0, "f4", kFixedCost2, 7),
                                  Call(3, "t", kFixed, 7)};
  EXPECT_EQ(Plan(calls), (std::vector<int>{-1, -1, 0, 3, 3, 0, -1}));
}

TEST(BatchCodec, FunctionsBeyondOneDigitNeverReuse) {
  std::vector<BatchCall> calls = {Call(10, "a", kFixed, 7), Call(10, "b", kFixed, 7),
                                  Call(-1, "c", kFixed, 7), Call(-1, "d", kFixed, 7),
                                  Call(9, "e", kFixed, 7),  Call(9, "f", kFixed, 7)};
  EXPECT_EQ(Plan(calls), (std::vector<int>{-1, -1, -1, -1, -1, 0}));
}

TEST(BatchCodec, ABatchIsWrittenAsItsKeysThenEachCallOrItsMarker) {
  const std::string x = Bulks({"x"});
  std::vector<BatchCall> calls = {Call(0, "f", kFixed, 7), Call(5, "c", kAcquireA, 5),
                                  Call(0, "g", kFixed, 7), Call(5, "c", kAcquireB, 5),
                                  Call(6, "c", x, 1)};
  PlanArgumentReuse(calls.data(), calls.size());
  std::string out;
  AppendBatchArguments(out, calls.data(), calls.size(), /*undeclared=*/false);
  const std::string want = "$1\r\n5\r\n$1\r\nf\r\n$1\r\nc\r\n$1\r\ng\r\n$1\r\nc\r\n$1\r\nc\r\n" +
                           Bulks({"0"}) + kFixed + Bulks({"5"}) + kAcquireA + Bulks({"0/"}) +
                           Bulks({"5/3", "b"}) + Bulks({"6"}) + x;
  EXPECT_EQ(out, want);
  // EVALSHA, the script, numkeys, 5 keys, then 8 + 6 + 1 + 2 + 2 items.
  EXPECT_EQ(BatchItems(calls.data(), calls.size(), false), 3u + 5u + 19u);
  // Undeclared keys: numkeys 0, then the number of calls, then the same.
  std::string undeclared;
  AppendBatchArguments(undeclared, calls.data(), calls.size(), /*undeclared=*/true);
  EXPECT_EQ(undeclared, Bulks({"0"}) + want);
  EXPECT_EQ(BatchItems(calls.data(), calls.size(), true), 3u + 5u + 19u + 1u);
}

// A reply read from its RESP text, as the connection's reader makes it.
std::unique_ptr<redisReply, void (*)(void*)> Parse(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  EXPECT_NE(reply, nullptr) << resp;
  return {static_cast<redisReply*>(reply), freeReplyObject};
}

// What one call's reply holds, in a line: "int 3", "str x", "nil", "err ...",
// "array[int 1,int 2]".
std::string Show(const redisReply* r) {
  if (r == nullptr) return "none";
  switch (r->type) {
    case REDIS_REPLY_INTEGER: return "int " + std::to_string(r->integer);
    case REDIS_REPLY_STRING: return "str " + std::string(r->str, r->len);
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_ERROR: return "err " + std::string(r->str, r->len);
    case REDIS_REPLY_ARRAY: {
      std::string out = "array[";
      for (size_t i = 0; i < r->elements; ++i) out += (i ? "," : "") + Show(r->element[i]);
      return out + "]";
    }
    default: return "?";
  }
}

// Every call's reply read from `resp` for `n` calls, then "end" or "more" (items left).
std::vector<std::string> Read(const std::string& resp, size_t n, bool* readonly = nullptr) {
  auto reply = Parse(resp);
  BatchReplyReader reader(*reply);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const redisReply* own = reader.Next();
    out.push_back(Show(own));
    if (own == nullptr) break;
  }
  out.push_back(reader.AtEnd() ? "end" : "more");
  if (readonly) *readonly = reader.readonly();
  return out;
}

TEST(BatchCodec, DecisionsAreTheirFourItems) {
  EXPECT_EQ(Read("*8\r\n:1\r\n:9\r\n:0\r\n:0\r\n:0\r\n:0\r\n:500\r\n:500\r\n", 2),
            (std::vector<std::string>{"array[int 1,int 9,int 0,int 0]",
                                      "array[int 0,int 0,int 500,int 500]", "end"}));
  EXPECT_EQ(Read("*4\r\n:2\r\n:10\r\n:0\r\n:0\r\n", 1),
            (std::vector<std::string>{"array[int 2,int 10,int 0,int 0]", "end"}));
}

TEST(BatchCodec, OtherTablesFollowTheirWidth) {
  EXPECT_EQ(Read("*6\r\n:-4\r\n$1\r\na\r\n$1\r\nb\r\n:-2\r\n:-3\r\n:7\r\n", 3),
            (std::vector<std::string>{"array[str a,str b]", "array[]", "array[int 7]", "end"}));
}

TEST(BatchCodec, MinusOneIsFollowedByOneValue) {
  EXPECT_EQ(Read("*4\r\n:-1\r\n:1\r\n:-1\r\n$-1\r\n", 2),
            (std::vector<std::string>{"int 1", "nil", "end"}));
}

TEST(BatchCodec, AnErrorIsOneCallsReplyAndReadOnlyIsNoted) {
  bool readonly = true;
  EXPECT_EQ(Read("*6\r\n-ERR bad cost\r\n:1\r\n:9\r\n:0\r\n:0\r\n-ERR x\r\n", 3, &readonly),
            (std::vector<std::string>{"err ERR bad cost", "array[int 1,int 9,int 0,int 0]",
                                      "err ERR x", "end"}));
  EXPECT_FALSE(readonly);
  EXPECT_EQ(Read("*3\r\n:-1\r\n:0\r\n-READONLY You can't write against a read only replica.\r\n", 2,
                 &readonly),
            (std::vector<std::string>{
                "int 0", "err READONLY You can't write against a read only replica.", "end"}));
  EXPECT_TRUE(readonly);
  EXPECT_TRUE(IsReadOnlyError("READONLY x"));
  EXPECT_FALSE(IsReadOnlyError("ERR READONLY"));
}

TEST(BatchCodec, AMalformedReplyAnswersNoCallFromWhereItStrays) {
  // A string where a head belongs, an unknown code, a decision cut short, a list longer
  // than what is left: the calls before it have their replies, the rest none.
  EXPECT_EQ(Read("*5\r\n:1\r\n:9\r\n:0\r\n:0\r\n$1\r\nx\r\n", 2),
            (std::vector<std::string>{"array[int 1,int 9,int 0,int 0]", "none", "more"}));
  EXPECT_EQ(Read("*1\r\n:3\r\n", 1), (std::vector<std::string>{"none", "more"}));
  EXPECT_EQ(Read("*3\r\n:1\r\n:9\r\n:0\r\n", 1), (std::vector<std::string>{"none", "more"}));
  EXPECT_EQ(Read("*2\r\n:-4\r\n$1\r\na\r\n", 1), (std::vector<std::string>{"none", "more"}));
  EXPECT_EQ(Read("*1\r\n:-1\r\n", 1), (std::vector<std::string>{"none", "more"}));
  // Fewer calls' items than calls, or more.
  EXPECT_EQ(Read("*2\r\n:-1\r\n:1\r\n", 2), (std::vector<std::string>{"int 1", "none", "end"}));
  EXPECT_EQ(Read("*3\r\n:-1\r\n:1\r\n:5\r\n", 1), (std::vector<std::string>{"int 1", "more"}));
  // Not an array at all: no call's reply.
  EXPECT_EQ(Read(":1\r\n", 1), (std::vector<std::string>{"none", "end"}));
}

// The manifest's functions are those of the scripts the connection loads, in one order:
// an algorithm's function is its Algorithm value and its script's index.
TEST(BatchManifest, FunctionsMatchTheScriptsAndTheAlgorithms) {
  const std::vector<Script> scripts = AllScripts();
  ASSERT_EQ(batch_manifest::kFunctionCount, 7);
  for (int f = 0; f < batch_manifest::kConcurrency + 1; ++f) {
    EXPECT_EQ(scripts[static_cast<size_t>(f)].name, batch_manifest::kName[f]);
  }
  EXPECT_EQ(batch_manifest::kName[kReleaseFunction], std::string_view("release"));
  EXPECT_EQ(batch_manifest::kArity[kConcurrencyFunction], 5);
  EXPECT_EQ(batch_manifest::kAlgorithmCount, 5);
  // The script's own tables, as generated from the same list.
  const std::string_view batch = scripts[static_cast<size_t>(kBatchScript)].source;
  EXPECT_NE(batch.find("local ARITY = '8888851'\n"), std::string_view::npos);
  EXPECT_NE(batch.find("local NUMERIC = {'45', '345', '4', '3456', '3456'}\n"),
            std::string_view::npos);
}

}  // namespace
}  // namespace sluice::internal
