// DataFile: the owner of the NVMe tier's data file descriptor. Opens a
// regular file (created and preallocated with fallocate) or a block device,
// with O_DIRECT when the file system accepts it.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::internal {

class DataFile {
 public:
  // Opens (creating a missing regular file) without sizing it. With
  // `direct`, O_DIRECT is tried first; a file system that refuses it (tmpfs)
  // gets buffered I/O and one warning. The file is locked (flock, exclusive)
  // while open: Unavailable when another DataFile or an offline reader holds it.
  // A child forked meanwhile does not hold it (nvme_lock_fds.h).
  static Result<DataFile> Open(const std::string& path, bool direct, LogSink* log);
  // Makes the file at least `bytes` long, its space reserved. Separate from
  // Open so that a store refused for its layout is not grown first. A file
  // system without fallocate gets a sparse file and one warning.
  // ResourceExhausted when the space cannot be reserved; InvalidArgument for
  // a block device smaller than `bytes`, or a file that would grow past the
  // process's RLIMIT_FSIZE (which would otherwise end it with SIGXFSZ).
  Status Reserve(uint64_t bytes, LogSink* log);

  DataFile() = default;
  DataFile(DataFile&& other) noexcept;
  DataFile& operator=(DataFile&& other) noexcept;
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  ~DataFile();

  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  bool block_device() const { return block_device_; }
  bool preallocated() const { return preallocated_; }
  // The file did not exist before this Open, or was empty: no block of an
  // older store is in it.
  bool created() const { return created_; }
  // The file was not created by this Open and holds bytes: a regular file
  // longer than 0, or a block device whose first 4 KiB are not all zero
  // (a new or discarded device reads as zeros).
  bool holds_data() const { return holds_data_; }
  // The regular file's length when opened (a block device: UINT64_MAX).
  // Blocks an older index places beyond it were lost with a truncation.
  uint64_t size_at_open() const { return size_at_open_; }
  // After a failed Reserve of a file this Open created: empties it, so the
  // next open starts afresh (whatever layout this one recorded is void).
  void ForgetCreated();
  // After a refused open: removes the file if this Open made it, so that a
  // path on a disk not mounted leaves nothing behind on the one beneath.
  void RemoveIfMade();

 private:
  void CloseLock();
  Status CheckFileSizeLimit(uint64_t bytes) const;

  int fd_ = -1;
  std::string path_;
  int lock_fd_ = -1;  // holds the flock; never used for I/O
  bool direct_ = false;
  bool block_device_ = false;
  bool preallocated_ = false;
  bool created_ = false;
  bool made_ = false;  // the path did not exist before Open
  bool holds_data_ = false;
  uint64_t size_at_open_ = UINT64_MAX;
};

}  // namespace kvtier::internal
