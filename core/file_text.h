// Reading a small text file whole (a config, a trace, a secret) so that
// every failure is an errno the caller words: fopen succeeds on a directory
// and the read is where it fails (EISDIR), and a stream's read of one throws.
#pragma once

#include <cstddef>
#include <string>

namespace kvtier::internal {

// Reads the file at `path` into *out. Returns 0, or the errno of the open
// (*opened false) or of the read (*opened true; a directory gives EISDIR), or
// EFBIG once more than `max_bytes` were read.
int ReadFileText(const std::string& path, size_t max_bytes, std::string* out, bool* opened);

}  // namespace kvtier::internal
