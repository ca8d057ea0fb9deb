// Prints the block keys of a fixed token sequence, one hex key per line, for
// the cross-process determinism test. Argument: "xxh3_128" or "sha256".
#include <cstdio>
#include <string>
#include <vector>

#include "kvtier/block_key.h"

int main(int argc, char** argv) {
  using namespace kvtier;
  auto algo = ParseHashAlgorithm(argc > 1 ? argv[1] : "xxh3_128");
  if (!algo.ok()) return 2;
  NamespaceSpec spec{"m", "r", "fp16", "nhd", 0, 1, 4};
  KeyHasher h(ComputeNamespaceId(spec), *algo);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 17; ++i) tokens.push_back(i * 31 - 7);
  for (const BlockKey& k : h.Chain(tokens, 4)) std::printf("%s\n", ToHex(k).c_str());
  return 0;
}
