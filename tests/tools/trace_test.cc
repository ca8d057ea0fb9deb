#include "tools/bench/trace.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/tools/trace_line.h"

namespace kvtier::bench {
namespace {

const std::string kSourceDir = KVTIER_SOURCE_DIR;

std::string ParseError(std::string_view text) {
  Result<Trace> t = ParseMooncakeTrace(text, "t.jsonl");
  EXPECT_FALSE(t.ok());
  if (t.ok()) return "parsed";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

TEST(TraceTest, ParsesRequestsAndSkipsBlankLines) {
  Result<Trace> t = ParseMooncakeTrace(
      "{\"timestamp\": 5, \"input_length\": 513, \"output_length\": 7, \"hash_ids\": [9, 4],"
      " \"extra\": \"ignored\"}\n"
      "\n   \r\n"
      "{\"hash_ids\": [], \"output_length\": 0, \"input_length\": 0, \"timestamp\": 6}\r\n"
      "{\"timestamp\": 10000000000000, \"input_length\": 512, \"output_length\": 1,"
      " \"hash_ids\": [18446744073709551615]}",
      "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, "mem");
  EXPECT_EQ(t->block_tokens, 512u);
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_EQ(t->requests[0].timestamp_ms, 5u);
  EXPECT_EQ(t->requests[0].input_length, 513u);
  EXPECT_EQ(t->requests[0].output_length, 7u);
  EXPECT_EQ(t->requests[0].hash_ids, (std::vector<uint64_t>{9, 4}));
  EXPECT_EQ(t->requests[1].timestamp_ms, 6u);
  EXPECT_TRUE(t->requests[1].hash_ids.empty());
  EXPECT_EQ(t->requests[2].timestamp_ms, 10'000'000'000'000u);
  EXPECT_EQ(t->requests[2].hash_ids, (std::vector<uint64_t>{UINT64_MAX}));
}

TEST(TraceTest, RejectsMalformedLinesWithPathAndLine) {
  const std::string good =
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n";
  EXPECT_EQ(ParseError(good + "\n{\"timestamp\": 0,\n"),
            "t.jsonl:3: malformed JSON: parse error at line 1, column 17: syntax error while "
            "parsing object key - unexpected end of input; expected string literal");
  EXPECT_EQ(ParseError("[1, 2]"), "t.jsonl:1: expected a JSON object");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                       "\"hash_ids\": [1], \"timestamp\": 5}"),
            "t.jsonl:1: field \"timestamp\" appears twice");
  EXPECT_EQ(ParseError(good + "\n{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                              "\"hash_ids\": [1], \"hash_ids\": [2]}"),
            "t.jsonl:3: field \"hash_ids\" appears twice");
  // A nested object's keys are its own: only the request's fields count.
  EXPECT_TRUE(ParseMooncakeTrace("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                                 "\"hash_ids\": [1], \"x\": {\"x\": 1, \"timestamp\": 2}}",
                                 "t.jsonl", 512)
                  .ok());
  EXPECT_EQ(ParseError(good + "{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}"),
            "t.jsonl:2: missing field \"timestamp\"");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}"),
            "t.jsonl:1: missing field \"input_length\"");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}"),
            "t.jsonl:1: missing field \"output_length\"");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}"),
            "t.jsonl:1: missing field \"hash_ids\"");
  EXPECT_EQ(ParseError("{\"timestamp\": \"0\", \"input_length\": 10, \"output_length\": 1, "
                       "\"hash_ids\": [1]}"),
            "t.jsonl:1: field \"timestamp\" must be an integer");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1, "
                       "\"hash_ids\": [1]}"),
            "t.jsonl:1: field \"input_length\" must be an integer");
  EXPECT_EQ(ParseError("{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1, "
                       "\"hash_ids\": [1]}"),
            "t.jsonl:1: field \"timestamp\" is negative");
  // Past 10^13 ms a simulator's clock in nanoseconds leaves a uint64_t.
  EXPECT_EQ(ParseError("{\"timestamp\": 10000000000001, \"input_length\": 10, "
                       "\"output_length\": 1, \"hash_ids\": [1]}"),
            "t.jsonl:1: field \"timestamp\" is out of range");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 4294967296, \"output_length\": 1, "
                       "\"hash_ids\": [1]}"),
            "t.jsonl:1: field \"input_length\" is out of range");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": -3, "
                       "\"hash_ids\": [1]}"),
            "t.jsonl:1: field \"output_length\" is negative");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, "
                       "\"hash_ids\": 1}"),
            "t.jsonl:1: field \"hash_ids\" must be an array");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 1, "
                       "\"hash_ids\": [1, -2, 3]}"),
            "t.jsonl:1: hash_ids[1] is negative");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 1, "
                       "\"hash_ids\": [1, 2, null]}"),
            "t.jsonl:1: hash_ids[2] must be an integer");
  EXPECT_EQ(ParseError(good + good +
                       "{\"timestamp\": 0, \"input_length\": 1025, "
                       "\"output_length\": 1, \"hash_ids\": [1, 2]}"),
            "t.jsonl:3: hash_ids has 2 ids, expected 3 for input_length 1025");
  EXPECT_EQ(ParseError("{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, "
                       "\"hash_ids\": [1, 2]}"),
            "t.jsonl:1: hash_ids has 2 ids, expected 1 for input_length 512");
}

// The reader's own rules: requests in arrival order, distinct ids in a
// request, and an integer too large for 64 bits called out of range (it
// parses as floating point). The sweep served a late line's earlier request
// in file order, and counted [1, 1, 1, 1] as four hits of one block.
TEST(TraceTest, RejectsRequestsOutOfOrderRepeatedIdsAndHugeIntegers) {
  auto line = [](const std::string& ts, const std::string& ids, int len = 10) {
    return "{\"timestamp\": " + ts + ", \"input_length\": " + std::to_string(len) +
           ", \"output_length\": 1, \"hash_ids\": [" + ids + "]}\n";
  };
  EXPECT_EQ(ParseError(line("1000", "1") + "\n" + line("1000", "2") + line("0", "3")),
            "t.jsonl:4: timestamp 0 is before line 3's 1000; requests must be in arrival order");
  EXPECT_EQ(ParseError(line("0", "7, 8, 7", 1500)),
            "t.jsonl:1: hash_ids[2] repeats hash_ids[0] (7); a request's ids must be distinct");
  EXPECT_EQ(ParseError(line("99999999999999999999999", "1")),
            "t.jsonl:1: field \"timestamp\" is out of range");
  EXPECT_EQ(ParseError(line("0", "18446744073709551616")),
            "t.jsonl:1: hash_ids[0] is out of range");
  EXPECT_EQ(ParseError(line("0", "1e300")), "t.jsonl:1: hash_ids[0] is out of range");
  EXPECT_EQ(ParseError(line("0", "2.5")), "t.jsonl:1: hash_ids[0] must be an integer");
  // A number no double holds is refused by the parser itself (it used to
  // throw past the reader, ending the process), in any field.
  const std::string huge = "t.jsonl:1: malformed JSON: number overflow parsing '1e400'";
  EXPECT_EQ(ParseError(line("0", "1e400")), huge);
  EXPECT_EQ(ParseError(line("1e400", "1")), huge);
  EXPECT_EQ(ParseError("{\"extra\": 1e400, \"timestamp\": 0, \"input_length\": 10, "
                       "\"output_length\": 1, \"hash_ids\": [1]}"),
            huge);
  // Equal timestamps are in order.
  EXPECT_TRUE(ParseMooncakeTrace(line("5", "1") + line("5", "1"), "t").ok());
}

TEST(TraceTest, MissingFileIsNotFound) {
  Result<Trace> t = ReadMooncakeTrace(kSourceDir + "/traces/no_such_trace.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no_such_trace.jsonl"), std::string_view::npos);
}

// A directory opens like a file but reads nothing: an error, not an empty trace.
TEST(TraceTest, DirectoryIsAnError) {
  Result<Trace> t = ReadMooncakeTrace(kSourceDir + "/traces");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("/traces: is a directory"), std::string_view::npos)
      << t.status().message();
}

TEST(TraceTest, BlockTokensAtCoversPartialTail) {
  TraceRequest r;
  r.input_length = 1200;
  EXPECT_EQ(BlockTokensAt(r, 0, 512), 512u);
  EXPECT_EQ(BlockTokensAt(r, 1, 512), 512u);
  EXPECT_EQ(BlockTokensAt(r, 2, 512), 176u);
  EXPECT_EQ(BlockTokensAt(r, 3, 512), 0u);
  r.hash_ids = {7, 8, 9};
  EXPECT_EQ(FullBlocks(r, 512), 2u);
  r.input_length = 1536;
  EXPECT_EQ(FullBlocks(r, 512), 3u);
  r.input_length = 511;
  EXPECT_EQ(FullBlocks(r, 512), 0u);
}

TEST(TraceTest, InfiniteCacheOnTinyTrace) {
  Result<Trace> t = ReadMooncakeTrace(kSourceDir + "/traces/tiny.jsonl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 7u);
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.requests, 7u);
  EXPECT_EQ(s.blocks, 20u);
  EXPECT_EQ(s.hit_blocks, 9u);
  // Line 7's 2 follows 11, not 1: another block, with an id of its own.
  EXPECT_EQ(t->renamed_blocks, 1u);
  EXPECT_EQ(s.unique_blocks, 11u);
  EXPECT_EQ(s.tokens, 8584u);
  EXPECT_EQ(s.hit_tokens, 4160u);
  // A cache of full blocks: line 5's partial 5 is no hit.
  s = ComputeInfiniteCacheStats(t->requests, t->block_tokens, CachedBlocks::kFull);
  EXPECT_EQ(s.blocks, 20u);
  EXPECT_EQ(s.hit_blocks, 8u);
  EXPECT_EQ(s.unique_blocks, 11u);
  EXPECT_EQ(s.tokens, 8584u);
  EXPECT_EQ(s.hit_tokens, 4096u);
}

TEST(TraceTest, InfiniteCacheCountsOnlyPrefixesSeenInEarlierRequests) {
  // A request's own blocks are no hits (the cache holds them only after it
  // ran), and an id seen before counts only behind a hit prefix.
  Result<Trace> t = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [3, 4]}\n"
      "{\"timestamp\": 1, \"input_length\": 1536, \"output_length\": 1, \"hash_ids\": [3, 4, 5]}\n"
      "{\"timestamp\": 2, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [6, 5]}\n",
      "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.blocks, 7u);
  EXPECT_EQ(s.hit_blocks, 2u);
  EXPECT_EQ(s.hit_tokens, 1024u);
  EXPECT_EQ(s.unique_blocks, 5u);  // 5 after 6 is not the 5 after 4
}

TEST(TraceTest, AnIdUsedAgainUnderAnotherPrefixNamesAnotherBlock) {
  // Before, the reference and the sweep keyed blocks by the file's id alone:
  // they counted 5 hits here (2 alone at line 2 as the 2 after 1; 3 after 1
  // as the 3 after 2) where a replay found 3.
  Result<Trace> t = ParseMooncakeTrace(IdsUsedUnderOtherPrefixes(), "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->renamed_blocks, 2u);
  // Ids the file does not use, from 0 up; the same block keeps its id.
  EXPECT_EQ(t->requests[0].hash_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(t->requests[1].hash_ids, (std::vector<uint64_t>{0}));
  EXPECT_EQ(t->requests[2].hash_ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(t->requests[3].hash_ids, (std::vector<uint64_t>{1, 4}));
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.hit_blocks, 3u);  // 1 2 of line 3, 1 of line 4
  EXPECT_EQ(s.unique_blocks, 5u);
  // A renamed block that comes back at its own place is a hit.
  t = ParseMooncakeTrace(
      TraceLine(0, 1024, "1, 2") + TraceLine(1, 1024, "3, 2") + TraceLine(2, 1024, "3, 2"), "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->renamed_blocks, 1u);
  EXPECT_EQ(t->requests[1].hash_ids, t->requests[2].hash_ids);
  EXPECT_EQ(ComputeInfiniteCacheStats(*t).hit_blocks, 2u);
}

TEST(TraceTest, APartialBlocksIdUsedForALongerBlockNamesAnotherBlock) {
  // 7 holds 100 tokens, then 512: the reference counted 512 hit tokens.
  Result<Trace> t = ParseMooncakeTrace(
      TraceLine(0, 100, "7") + TraceLine(1, 512, "7") + TraceLine(2, 100, "7"), "mem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->renamed_blocks, 1u);
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.hit_blocks, 1u);  // line 3: the same 100 tokens as line 1
  EXPECT_EQ(s.hit_tokens, 100u);
  EXPECT_EQ(s.unique_blocks, 2u);
}

TEST(TraceTest, ATraceLargerThanTheBoundIsRefusedByName) {
  // A wrong path such as /dev/zero read until memory ran out, then ended
  // the process with an uncaught std::bad_alloc.
  Result<Trace> t = ReadMooncakeTrace("/dev/zero");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("/dev/zero: larger than 1024 MiB"), std::string::npos)
      << t.status().ToString();
}

TEST(TraceTest, InfiniteCacheOnShippedArxivTrace) {
  Result<Trace> t = ReadMooncakeTrace(kSourceDir + "/traces/mooncake_arxiv_trace_first1000.jsonl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 1000u);
  EXPECT_EQ(t->requests[155].timestamp_ms, 27482u);
  EXPECT_EQ(t->requests[155].input_length, 6955u);
  InfiniteCacheStats s = ComputeInfiniteCacheStats(*t);
  EXPECT_EQ(s.blocks, 19686u);
  EXPECT_EQ(s.hit_blocks, 7479u);
  EXPECT_EQ(s.unique_blocks, 12207u);
  EXPECT_EQ(t->renamed_blocks, 0u);  // prefix-chained, as the format says
  s = ComputeInfiniteCacheStats(t->requests, t->block_tokens, CachedBlocks::kFull);
  EXPECT_EQ(s.hit_blocks, 7468u);
  EXPECT_EQ(s.hit_tokens, 3823616u);
}

}  // namespace
}  // namespace kvtier::bench
