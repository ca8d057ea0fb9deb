// Contiguous byte runs that move one engine block to or from a canonical host
// block, derived from the offset functions of kvtier/kv_layout.h.
//
// Every copy engine builds its copies from these runs (the host stand-in
// memcpys them; a CUDA engine turns them into batched copies or a gather
// kernel's descriptor table), so all engines move exactly the same bytes.
// The checks of a batch of BlockCopy records live here for the same reason:
// every engine rejects the same inputs with the same messages.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/kv_layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// `bytes` bytes at `engine_offset` of engine tensor `tensor` correspond to
// the same bytes at `host_offset` of the host block.
struct CopyRun {
  uint32_t tensor = 0;         // index < EngineTensorCount(layout)
  uint64_t engine_offset = 0;  // bytes into that tensor
  uint64_t host_offset = 0;    // bytes into the host block
  uint64_t bytes = 0;

  bool operator==(const CopyRun&) const = default;
};

// Appends the runs of layer `layer` (K page, then V page; the one latent
// page for MLA) of engine block `block`. Together they cover host bytes
// [P * layer * PageBytes(), P * (layer + 1) * PageBytes()), P = Planes(),
// exactly once, in increasing host order. Runs appended by one call that are
// contiguous on both sides are merged: NHD gives 2 runs (1 when
// num_blocks == 1), HND and packed 2 * block_tokens * num_kv_heads runs of
// head_size elements (fewer in degenerate shapes), FlashInfer, cross-layer
// and MLA 1 run. Runs already in `runs` are never merged with.
// REQUIRES: layout.Validate().ok(), block < num_blocks, layer < num_layers.
void AppendLayerRuns(const KvLayout& layout, uint32_t block, uint32_t layer,
                     std::vector<CopyRun>* runs);

// Appends the runs of every layer of `block`, in increasing host order,
// merged across layers where contiguous (one run for cross-layer).
// REQUIRES: as AppendLayerRuns.
void AppendBlockRuns(const KvLayout& layout, uint32_t block, std::vector<CopyRun>* runs);

// The most runs one AppendLayerRuns call appends for any block of `layout`,
// before merging: Planes() where pages are contiguous in the engine,
// Planes() * block_tokens * num_kv_heads for HND and packed. An empty list
// with this capacity (MaxBlockRuns for AppendBlockRuns) takes one call's runs
// without reallocating. REQUIRES: layout.Validate().ok().
uint64_t MaxLayerRuns(const KvLayout& layout);
// num_layers * MaxLayerRuns(layout). REQUIRES: as MaxLayerRuns.
uint64_t MaxBlockRuns(const KvLayout& layout);

// InvalidArgument unless engine_block < num_blocks and host_bytes equals
// BlockBytes().
Status CheckBlockCopy(const KvLayout& layout, uint32_t engine_block, uint64_t host_bytes);

// Checks each copy on its own and returns one status per copy: OK or
// InvalidArgument naming the copy and its engine block, when
//  - CheckBlockCopy fails ("copy 1: engine block 5 out of range [0, 5)",
//    "copy 0 (engine block 2): host buffer is 287 bytes; ..."),
//  - `unique_blocks` and an earlier copy targets the same engine block
//    ("copy 2 (engine block 3): engine block 3 is already the target of
//    copy 0"),
//  - `disjoint_hosts` and its host buffer overlaps the buffer of another copy
//    that passed: of each overlapping pair the later copy fails, until the
//    buffers of the copies that pass are pairwise disjoint.
std::vector<Status> CheckEachBlockCopy(const KvLayout& layout, std::span<const BlockCopy> copies,
                                       bool unique_blocks, bool disjoint_hosts);

}  // namespace kvtier::internal
