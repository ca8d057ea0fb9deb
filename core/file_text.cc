#include "core/file_text.h"

#include <cerrno>
#include <cstdio>
#include <memory>

namespace kvtier::internal {

int ReadFileText(const std::string& path, size_t max_bytes, std::string* out, bool* opened) {
  out->clear();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  *opened = file != nullptr;
  if (file == nullptr) return errno != 0 ? errno : ENOENT;
  char buf[64 * 1024];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), file.get())) > 0) {
    out->append(buf, n);
    if (out->size() > max_bytes) return EFBIG;
  }
  if (std::ferror(file.get())) return errno != 0 ? errno : EIO;
  return 0;
}

}  // namespace kvtier::internal
