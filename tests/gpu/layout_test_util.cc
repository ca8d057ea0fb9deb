#include "tests/gpu/layout_test_util.h"

#include <chrono>
#include <future>
#include <memory>
#include <random>

namespace kvtier::testing {

KvLayout SmallLayout(KvLayoutKind kind) {
  KvLayout l;
  l.kind = kind;
  l.num_layers = 3;
  l.num_blocks = 5;
  l.block_tokens = 4;
  l.num_kv_heads = kind == KvLayoutKind::kMla ? 1 : 2;
  l.head_size = kind == KvLayoutKind::kMla ? 12 : 3;
  l.elem_bytes = 2;
  return l;
}

EnginePos RefEngine(const KvLayout& l, uint32_t block, uint32_t layer, uint32_t kv, uint32_t token,
                    uint32_t head) {
  // Byte strides of each dimension, innermost first.
  const uint64_t row = uint64_t{l.head_size} * l.elem_bytes;
  const uint64_t page = row * l.num_kv_heads * l.block_tokens;
  switch (l.kind) {
    case KvLayoutKind::kVllmNhd: {
      const uint64_t s_head = row, s_token = row * l.num_kv_heads, s_block = page,
                     s_kv = page * l.num_blocks;
      return {layer, kv * s_kv + block * s_block + token * s_token + head * s_head};
    }
    case KvLayoutKind::kVllmHnd: {
      const uint64_t s_token = row, s_head = row * l.block_tokens, s_block = page,
                     s_kv = page * l.num_blocks;
      return {layer, kv * s_kv + block * s_block + head * s_head + token * s_token};
    }
    case KvLayoutKind::kCrossLayer: {
      const uint64_t s_head = row, s_token = row * l.num_kv_heads, s_kv = page, s_layer = 2 * page,
                     s_block = 2 * page * l.num_layers;
      return {0, block * s_block + layer * s_layer + kv * s_kv + token * s_token + head * s_head};
    }
    case KvLayoutKind::kFlashInfer: {
      const uint64_t s_head = row, s_token = row * l.num_kv_heads, s_kv = page, s_block = 2 * page;
      return {layer, block * s_block + kv * s_kv + token * s_token + head * s_head};
    }
    case KvLayoutKind::kPacked: {
      // (N, H, T, 2D): the V row sits right after the K row.
      const uint64_t s_kv = row, s_token = 2 * row, s_head = 2 * row * l.block_tokens,
                     s_block = s_head * l.num_kv_heads;
      return {layer, block * s_block + head * s_head + token * s_token + kv * s_kv};
    }
    case KvLayoutKind::kMla: {
      const uint64_t s_token = row, s_block = page;
      return {layer, block * s_block + token * s_token};
    }
  }
  return {};
}

uint64_t RefHost(const KvLayout& l, uint32_t layer, uint32_t kv, uint32_t token, uint32_t head) {
  const uint64_t row = uint64_t{l.head_size} * l.elem_bytes;
  const uint64_t s_token = row * l.num_kv_heads;
  const uint64_t s_kv = s_token * l.block_tokens;
  const uint64_t s_layer = (l.kind == KvLayoutKind::kMla ? 1 : 2) * s_kv;
  return layer * s_layer + kv * s_kv + token * s_token + head * row;
}

uint32_t RefBlockOfByte(const KvLayout& l, uint64_t offset) {
  switch (l.kind) {
    case KvLayoutKind::kCrossLayer:
      return static_cast<uint32_t>(offset / l.BlockBytes());
    case KvLayoutKind::kFlashInfer:
    case KvLayoutKind::kPacked:
      return static_cast<uint32_t>(offset / (2 * l.PageBytes()));
    case KvLayoutKind::kMla:
      return static_cast<uint32_t>(offset / l.PageBytes());
    default:  // (2, N, ...)
      return static_cast<uint32_t>((offset / l.PageBytes()) % l.num_blocks);
  }
}

void FillPattern(HostCopyEngine& engine) {
  const KvLayout& l = engine.layout();
  uint64_t id = 1;
  for (uint32_t t = 0; t < EngineTensorCount(l); ++t) {
    std::span<std::byte> tensor = engine.Tensor(t);
    for (uint64_t off = 0; off < tensor.size(); off += l.elem_bytes, ++id) {
      for (uint32_t b = 0; b < l.elem_bytes; ++b) {
        tensor[off + b] = static_cast<std::byte>((id >> (8 * b)) & 0xff);
      }
    }
  }
}

std::vector<std::vector<std::byte>> Snapshot(HostCopyEngine& engine) {
  std::vector<std::vector<std::byte>> out;
  for (uint32_t t = 0; t < EngineTensorCount(engine.layout()); ++t) {
    std::span<std::byte> tensor = engine.Tensor(t);
    out.emplace_back(tensor.begin(), tensor.end());
  }
  return out;
}

std::vector<std::byte> RandomBlock(const KvLayout& l, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(1, 255);
  std::vector<std::byte> out(l.BlockBytes());
  for (std::byte& b : out) b = static_cast<std::byte>(byte(rng));
  return out;
}

bool CopyResults::ok() const {
  for (const Status& st : each) {
    if (!st.ok()) return false;
  }
  return true;
}

std::string CopyResults::ToString() const {
  std::string out;
  for (const Status& st : each) out += (out.empty() ? "" : " | ") + st.ToString();
  return out;
}

namespace {

CopyResults RunAndWait(CopyEngine& engine, std::span<const BlockCopy> copies, bool gather,
                       LayerDone on_layer) {
  auto promise = std::make_shared<std::promise<std::vector<Status>>>();
  std::future<std::vector<Status>> future = promise->get_future();
  CopyDone done = [promise](std::vector<Status> st) { promise->set_value(std::move(st)); };
  if (gather) {
    engine.Gather(copies, std::move(done));
  } else {
    engine.Scatter(copies, std::move(on_layer), std::move(done));
  }
  if (future.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    return {std::vector<Status>(copies.size(),
                                Status::DeadlineExceeded("copy did not complete in 20 s"))};
  }
  return {future.get()};
}

}  // namespace

CopyResults GatherAndWait(CopyEngine& engine, std::span<const BlockCopy> copies) {
  return RunAndWait(engine, copies, /*gather=*/true, nullptr);
}

CopyResults ScatterAndWait(CopyEngine& engine, std::span<const BlockCopy> copies,
                           LayerDone on_layer) {
  return RunAndWait(engine, copies, /*gather=*/false, std::move(on_layer));
}

}  // namespace kvtier::testing
