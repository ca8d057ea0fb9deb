#include "tiers/remote/remote_protocol.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_routing.h"

namespace kvtier::internal::memd {
namespace {

std::vector<std::byte> Bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(MemdProtocolTest, HeaderRoundTripsAndHasAFixedLayout) {
  FrameHeaderBytes h = EncodeFrameHeader({Opcode::kGetData, 7, 0x01020304, 100});
  EXPECT_EQ(std::vector<std::byte>(h.begin(), h.end()),
            Bytes({'K', 'V', 'R', 'M', 1, 21, 7, 0, 4, 3, 2, 1, 100, 0, 0, 0}));
  auto d = DecodeFrameHeader(h, 1000);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->opcode, Opcode::kGetData);
  EXPECT_EQ(d->item, 7);
  EXPECT_EQ(d->request_id, 0x01020304u);
  EXPECT_EQ(d->body_bytes, 100u);
}

TEST(MemdProtocolTest, BadHeadersAreRefusedWithTheReason) {
  auto msg = [](FrameHeaderBytes h, uint64_t cap = 1000) {
    return std::string(DecodeFrameHeader(h, cap).status().message());
  };
  FrameHeaderBytes h = EncodeFrameHeader({Opcode::kGet, 0, 1, 10});
  FrameHeaderBytes bad = h;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(msg(bad), "bad frame magic");
  bad = h;
  bad[4] = std::byte{2};
  EXPECT_EQ(msg(bad), "protocol version 2 is not supported; expected 1");
  bad = h;
  bad[5] = std::byte{99};
  EXPECT_EQ(msg(bad), "unknown opcode 99");
  EXPECT_EQ(msg(EncodeFrameHeader({Opcode::kGet, 0, 1, kMaxControlBodyBytes + 1})),
            "frame body of 131073 bytes exceeds the limit of 131072");
  EXPECT_EQ(msg(EncodeFrameHeader({Opcode::kPutData, 0, 1, 1001})),
            "frame body of 1001 bytes exceeds the limit of 1000");
  EXPECT_EQ(msg(EncodeFrameHeader({Opcode::kPutData, 0, 1, 64})),
            "block frame of 64 bytes holds no payload");
  EXPECT_EQ(msg(EncodeFrameHeader({Opcode::kGet, 3, 1, 10})), "item index on a non-item frame");
  EXPECT_EQ(DecodeFrameHeader(std::span(h).first(15), 1000).status().message(),
            "frame header is 15 bytes; expected 16");
}

TEST(MemdProtocolTest, BodiesRoundTrip) {
  PutBegin b{NamespaceId{9}, {{BlockKey{1, 2}, 4096}, {BlockKey{3, 4}, 1}}};
  auto db = DecodePutBegin(EncodeBody(b));
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db->ns.value, 9u);
  ASSERT_EQ(db->items.size(), 2u);
  EXPECT_EQ(db->items[1].key, (BlockKey{3, 4}));
  EXPECT_EQ(db->items[0].payload_bytes, 4096u);

  KeyBatch k{NamespaceId{5}, {BlockKey{7, 8}}};
  auto dk = DecodeKeyBatch(EncodeBody(k));
  ASSERT_TRUE(dk.ok());
  EXPECT_EQ(dk->keys, std::vector<BlockKey>{(BlockKey{7, 8})});

  StatusList s{{StatusCode::kOk, StatusCode::kResourceExhausted}};
  auto ds = DecodeStatusList(EncodeBody(s));
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->codes, s.codes);

  auto de = DecodeError(EncodeBody(ErrorReply{StatusCode::kBusy, "full"}));
  ASSERT_TRUE(de.ok());
  EXPECT_EQ(de->code, StatusCode::kBusy);
  EXPECT_EQ(de->text, "full");

  Stats st{100, 10, 3, 1, {{9, 2, 8192}}};
  auto dst = DecodeStats(EncodeBody(st));
  ASSERT_TRUE(dst.ok());
  EXPECT_EQ(dst->used_slots, 3u);
  ASSERT_EQ(dst->namespaces.size(), 1u);
  EXPECT_EQ(dst->namespaces[0].bytes, 8192u);
}

TEST(MemdProtocolTest, MalformedBodiesAreRefused) {
  auto msg = [](const Status& s) { return std::string(s.message()); };
  std::vector<std::byte> body = EncodeBody(KeyBatch{NamespaceId{1}, {BlockKey{1, 1}}});
  EXPECT_EQ(msg(DecodeKeyBatch(std::span(body).first(20)).status()),
            "key batch body does not hold 1 keys");
  EXPECT_EQ(msg(DecodeKeyBatch(std::span(body).first(5)).status()), "key batch body is truncated");
  std::vector<std::byte> zero = EncodeBody(KeyBatch{NamespaceId{1}, {}});
  EXPECT_EQ(msg(DecodeKeyBatch(zero).status()), "key batch count 0 is outside 1..4096");
  PutBegin huge{NamespaceId{1}, {{BlockKey{1, 1}, kMaxBlockPayloadBytes + 1}}};
  EXPECT_EQ(msg(DecodePutBegin(EncodeBody(huge)).status()),
            "PUT_BEGIN payload size 1073741825 is outside 1..1073741824");
  PutBegin empty{NamespaceId{1}, {{BlockKey{1, 1}, 0}}};
  EXPECT_EQ(msg(DecodePutBegin(EncodeBody(empty)).status()),
            "PUT_BEGIN payload size 0 is outside 1..1073741824");
  std::vector<std::byte> hello = EncodeBody(Hello{});
  hello.push_back(std::byte{0});
  EXPECT_EQ(msg(DecodeHello(hello).status()), "HELLO body has 1 trailing bytes");
  EXPECT_EQ(msg(DecodeHello(std::span(hello).first(10)).status()), "HELLO body is truncated");
  EXPECT_EQ(msg(DecodeError(Bytes({1, 5, 0, 'a'})).status()), "ERROR body is truncated");
}

TEST(MemdProtocolTest, CheckClientFrameAcceptsRequestsOnly) {
  auto frame = Frame(Opcode::kGet, 1, EncodeBody(KeyBatch{NamespaceId{1}, {BlockKey{1, 1}}}));
  EXPECT_TRUE(CheckClientFrame(frame, 4096).ok());
  frame.pop_back();
  EXPECT_EQ(CheckClientFrame(frame, 4096).message(), "frame body is truncated");
  auto reply = Frame(Opcode::kStatusReply, 1, EncodeBody(StatusList{{StatusCode::kOk}}));
  EXPECT_EQ(CheckClientFrame(reply, 4096).message(), "opcode 14 is not a request");
}

TEST(MemdAuthTest, ProofsDependOnSecretNoncesAndRole) {
  const Nonce a = RandomNonce(), b = RandomNonce();
  EXPECT_NE(a, b);
  EXPECT_TRUE(SameMac(ClientProof("s", a, b), ClientProof("s", a, b)));
  EXPECT_FALSE(SameMac(ClientProof("s", a, b), ClientProof("t", a, b)));
  EXPECT_FALSE(SameMac(ClientProof("s", a, b), ClientProof("s", b, a)));
  EXPECT_FALSE(SameMac(ClientProof("s", a, b), ServerProof("s", a, b)));
}

// A path that is not a readable file is an error naming it, never a throw
// (a stream's read of a directory throws); the trailing newline is dropped.
TEST(MemdAuthTest, SecretFileRules) {
  char dir_template[] = "/tmp/kvtier-secret-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  auto is_dir = ReadSecretFile(dir);
  ASSERT_FALSE(is_dir.ok());
  EXPECT_EQ(is_dir.status().ToString(),
            "invalid_argument: cannot read secret file '" + dir + "': Is a directory");
  EXPECT_EQ(ReadSecretFile(dir + "/missing").status().code(), StatusCode::kInvalidArgument);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    return path;
  };
  auto ok = ReadSecretFile(write("s", "hunter2\r\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "hunter2");
  EXPECT_NE(ReadSecretFile(write("big", std::string(5000, 'x'))).status().message().find(
                "exceeds 4 KiB"),
            std::string_view::npos);
  EXPECT_NE(ReadSecretFile(write("empty", "\n")).status().message().find("is empty"),
            std::string_view::npos);
  std::filesystem::remove_all(dir);
}

TEST(MemdRoutingTest, AddingAServerMovesOnlyKeysToIt) {
  std::vector<uint64_t> three = {ServerId("10.0.0.1:7400"), ServerId("10.0.0.2:7400"),
                                 ServerId("10.0.0.3:7400")};
  std::vector<uint64_t> four = three;
  four.push_back(ServerId("10.0.0.4:7400"));
  std::vector<int> per(4, 0);
  int moved = 0;
  for (uint64_t i = 0; i < 4000; ++i) {
    const BlockKey key{i, i * 31};
    const size_t before = PickServer(NamespaceId{1}, key, three);
    const size_t after = PickServer(NamespaceId{1}, key, four);
    ++per[after];
    if (after != before) {
      ++moved;
      EXPECT_EQ(after, 3u) << "a key moved between two old servers";
    }
  }
  EXPECT_EQ(moved, per[3]);
  for (int n : per) EXPECT_GT(n, 800) << "shares are roughly even";
}

}  // namespace
}  // namespace kvtier::internal::memd
