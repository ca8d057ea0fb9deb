/* Uses kvtier through its C API alone, as a program in C (or a Python engine
 * through ctypes) would: opens a runtime on the host stand-in engine from
 * YAML text, derives keys from token ids, saves three blocks, finds them,
 * loads them into other engine blocks and compares every byte, then checks
 * that a miss and a bad argument are reported per block and by code.
 * Prints what it did; the last line is OK, or it exits 1. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/c_api.h"

static const char kConfig[] =
    "model:\n"
    "  preset: tiny\n"
    "  block_tokens: 16\n"
    "engine:\n"
    "  pool_blocks: 16\n"
    "tiers:\n"
    "  - name: host\n"
    "    type: host\n"
    "    capacity: 1MiB\n"
    "    hugepages: false\n"
    "    mlock: false\n";

enum { kBlocks = 3 };

static int failures = 0;

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kvtier_last_error());                                                     \
      ++failures;                                                                       \
    }                                                                                   \
  } while (0)

/* Counts layers reported in order; any other order poisons the count. */
static void OnLayer(void* user, uint32_t layer) {
  uint32_t* next = (uint32_t*)user;
  *next = (layer == *next) ? *next + 1 : UINT32_MAX;
}

static void Fill(unsigned char* block, uint64_t bytes, uint32_t seed) {
  for (uint64_t i = 0; i < bytes; ++i) block[i] = (unsigned char)((i * 131u + seed * 7919u) >> 3);
}

int main(void) {
  kvtier_runtime* rt = NULL;
  if (kvtier_open(NULL, kConfig, NULL, 0, NULL, NULL, NULL, &rt) != KVTIER_OK) {
    fprintf(stderr, "kvtier_open: %s\n", kvtier_last_error());
    return 1;
  }
  const uint64_t block_bytes = kvtier_block_bytes(rt);
  const uint32_t block_tokens = kvtier_block_tokens(rt);

  /* Three full blocks and a partial one, which gets no key. */
  const size_t num_tokens = (size_t)kBlocks * block_tokens + 5;
  int32_t* tokens = malloc(num_tokens * sizeof *tokens);
  unsigned char* expected = malloc(block_bytes);
  unsigned char* actual = malloc(block_bytes);
  if (tokens == NULL || expected == NULL || actual == NULL) return 1;
  for (size_t i = 0; i < num_tokens; ++i) tokens[i] = (int32_t)(i * 37 + 11);
  kvtier_key keys[kBlocks + 1];
  size_t count = 0;
  CHECK(kvtier_key_chain(rt, NULL, tokens, num_tokens, keys, kBlocks + 1, &count) == KVTIER_OK);
  CHECK(count == kBlocks);

  const uint32_t src[kBlocks] = {0, 1, 2};
  const uint32_t dst[kBlocks] = {9, 10, 11};
  for (uint32_t b = 0; b < kBlocks; ++b) {
    Fill(expected, block_bytes, b + 1);
    CHECK(kvtier_host_block_write(rt, src[b], expected, block_bytes) == KVTIER_OK);
  }
  kvtier_completion* c = NULL;
  CHECK(kvtier_save(rt, NULL, keys, src, kBlocks, NULL, &c) == KVTIER_OK);
  CHECK(kvtier_completion_wait(c, -1) == KVTIER_OK);
  CHECK(kvtier_completion_size(c) == kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    uint64_t bytes = 0;
    CHECK(kvtier_completion_result(c, i, &bytes) == KVTIER_OK);
    CHECK(bytes == block_bytes);
  }
  kvtier_completion_free(c);

  size_t hits = 0;
  uint8_t tiers[kBlocks] = {9, 9, 9};
  CHECK(kvtier_lookup(rt, keys, kBlocks, NULL, &hits, tiers) == KVTIER_OK);
  CHECK(hits == kBlocks);
  CHECK(tiers[0] == 0 && tiers[1] == 0 && tiers[2] == 0);

  uint32_t next_layer = 0;
  CHECK(kvtier_load(rt, keys, dst, kBlocks, 10 * 1000 * 1000 * 1000LL, OnLayer, &next_layer, &c) ==
        KVTIER_OK);
  CHECK(kvtier_completion_wait(c, -1) == KVTIER_OK);
  CHECK(next_layer > 0 && next_layer != UINT32_MAX);
  CHECK(kvtier_completion_layers_done(c) == next_layer);
  kvtier_completion_free(c);
  size_t same = 0;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    Fill(expected, block_bytes, b + 1);
    CHECK(kvtier_host_block_read(rt, dst[b], actual, block_bytes) == KVTIER_OK);
    same += memcmp(expected, actual, block_bytes) == 0;
  }
  CHECK(same == kBlocks);

  /* A key never saved: a miss for that block, not an error of the call. */
  const kvtier_key unknown = {1, 2};
  const uint32_t one = 12;
  CHECK(kvtier_load(rt, &unknown, &one, 1, -1, NULL, NULL, &c) == KVTIER_OK);
  CHECK(kvtier_completion_wait(c, -1) == KVTIER_NOT_FOUND);
  CHECK(kvtier_completion_result(c, 0, NULL) == KVTIER_NOT_FOUND);
  kvtier_completion_free(c);

  /* A bad argument: a code and a message, no crash. */
  CHECK(kvtier_lookup(rt, NULL, 1, NULL, &hits, NULL) == KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "keys is NULL") != NULL);

  printf("kvtier C API %d: namespace %016" PRIx64 ", block of %" PRIu64 " bytes, %u tokens\n",
         KVTIER_C_API_VERSION, kvtier_namespace(rt), block_bytes, (unsigned)block_tokens);
  printf("saved, found and loaded %zu of %d blocks byte for byte; %u layers reported\n", same,
         kBlocks, (unsigned)next_layer);
  kvtier_close(rt);
  free(tokens);
  free(expected);
  free(actual);
  if (failures != 0) return 1;
  printf("OK\n");
  return 0;
}
