#include "tiers/nvme/nvme_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "tiers/nvme/nvme_lock_fds.h"

namespace kvtier::internal {

DataFile::DataFile(DataFile&& other) noexcept { *this = std::move(other); }

DataFile& DataFile::operator=(DataFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    CloseLock();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    direct_ = other.direct_;
    block_device_ = other.block_device_;
    preallocated_ = other.preallocated_;
    created_ = other.created_;
    made_ = other.made_;
    holds_data_ = other.holds_data_;
    size_at_open_ = other.size_at_open_;
  }
  return *this;
}

DataFile::~DataFile() {
  if (fd_ >= 0) close(fd_);
  CloseLock();
}

void DataFile::CloseLock() {
  if (lock_fd_ < 0) return;
  UnlistLockFd(lock_fd_);
  close(lock_fd_);
  lock_fd_ = -1;
}

namespace {

// True when `path`'s directory lies on a file system mounted at /dev (not
// on one mounted below it, such as /dev/shm; nor where /dev is a plain
// directory of the root file system).
bool OnDevFs(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  struct stat dir {
  }, dev{}, root{};
  return stat(parent.empty() ? "." : parent.c_str(), &dir) == 0 && stat("/dev", &dev) == 0 &&
         stat("/", &root) == 0 && dev.st_dev != root.st_dev && dir.st_dev == dev.st_dev;
}

}  // namespace

Result<DataFile> DataFile::Open(const std::string& path, bool direct, LogSink* log) {
  DataFile f;
  f.path_ = path;
  struct stat st {};
  const bool existed = stat(path.c_str(), &st) == 0;
  f.block_device_ = existed && S_ISBLK(st.st_mode);
  // An empty regular file holds no block (a first open that failed to size
  // it, or a file truncated since): whatever an index says of it is void.
  f.created_ = !existed || (S_ISREG(st.st_mode) && st.st_size == 0);
  // Nothing is made on /dev's own file system: a device not found yet would
  // become a file in memory, and the store would be written there.
  if (!existed && OnDevFs(path)) return Status::NotFound("nvme: no device at " + path);
  f.made_ = !existed;
  const int base = O_RDWR | O_CLOEXEC | (f.block_device_ ? 0 : O_CREAT);
  f.fd_ = direct ? open(path.c_str(), base | O_DIRECT, 0644) : -1;
  f.direct_ = f.fd_ >= 0;
  if (f.fd_ < 0 && direct && errno != EINVAL) return FromErrno(errno, "open " + path);
  if (f.fd_ < 0) {
    f.fd_ = open(path.c_str(), base, 0644);
    if (f.fd_ < 0) return FromErrno(errno, "open " + path);
    if (direct && log) {
      log->Log(LogLevel::kWarning,
               "nvme: " + path + ": the file system refuses O_DIRECT; using buffered I/O");
    }
  }
  // One live tier per store: offline tools take a shared lock and are
  // refused while this one is held. The lock sits on a descriptor of its own
  // that io_uring never sees: in-flight requests keep their file alive after
  // the process dies, which would hold a lock on fd_ past a crash.
  f.lock_fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.lock_fd_ < 0) return FromErrno(errno, "open " + path);
  if (flock(f.lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Status::Unavailable("nvme: " + path +
                                 " is in use by another process: an open tier, or an offline "
                                 "reader such as kvtier-inspect nvme");
    }
    return FromErrno(errno, "flock " + path);
  }
  ListLockFd(f.lock_fd_);  // a forked child lets go of it (nvme_lock_fds.h)
  if (f.block_device_) {
    std::array<unsigned char, 4096> head{};
    const ssize_t n = pread(f.lock_fd_, head.data(), head.size(), 0);
    f.holds_data_ = n > 0 && std::any_of(head.begin(), head.begin() + n,
                                         [](unsigned char c) { return c != 0; });
  } else if (struct stat now{}; fstat(f.fd_, &now) == 0 && S_ISREG(now.st_mode)) {
    f.size_at_open_ = static_cast<uint64_t>(now.st_size);
    f.holds_data_ = !f.created_ && now.st_size > 0;
  }
  return f;
}

void DataFile::ForgetCreated() {
  if (created_ && !block_device_ && fd_ >= 0) (void)ftruncate(fd_, 0);
}

void DataFile::RemoveIfMade() {
  if (made_) (void)unlink(path_.c_str());
  made_ = false;
}

// Growing a file past RLIMIT_FSIZE raises SIGXFSZ, which ends the process
// unless the engine handles it: a tier whose file would cross the limit is
// refused before the file grows.
Status DataFile::CheckFileSizeLimit(uint64_t bytes) const {
  struct rlimit lim {};
  if (getrlimit(RLIMIT_FSIZE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return Status::Ok();
  struct stat now {};
  if (fstat(fd_, &now) == 0 && static_cast<uint64_t>(now.st_size) >= bytes) return Status::Ok();
  if (bytes <= lim.rlim_cur) return Status::Ok();
  return Status::InvalidArgument(
      "nvme: " + path_ + " would grow to " + std::to_string(bytes) +
      " bytes, past this process's file size limit of " + std::to_string(lim.rlim_cur) +
      " bytes (ulimit -f, RLIMIT_FSIZE): raise the limit or lower the tier's capacity");
}

Status DataFile::Reserve(uint64_t bytes, LogSink* log) {
  if (block_device_) {
    uint64_t size = 0;
    if (ioctl(fd_, BLKGETSIZE64, &size) != 0) return FromErrno(errno, "BLKGETSIZE64 " + path_);
    if (size < bytes) {
      return Status::InvalidArgument("nvme: block device " + path_ + " holds " +
                                     std::to_string(size) + " bytes; the tier needs " +
                                     std::to_string(bytes));
    }
    preallocated_ = true;
    return Status::Ok();
  }
  KVTIER_RETURN_IF_ERROR(CheckFileSizeLimit(bytes));
  if (fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) {
    preallocated_ = true;
    return Status::Ok();
  }
  if (errno != EOPNOTSUPP) return FromErrno(errno, "fallocate " + path_);
  struct stat now {};
  if (fstat(fd_, &now) == 0 && static_cast<uint64_t>(now.st_size) >= bytes) return Status::Ok();
  // Nothing can be reserved, so at least the space must be free now: a tier
  // larger than its disk would fail its writes, and its index's, once full.
  struct statvfs fs {};
  const uint64_t held = static_cast<uint64_t>(now.st_blocks) * 512;
  if (fstatvfs(fd_, &fs) == 0 && bytes > held &&
      bytes - held > static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) {
    return Status::ResourceExhausted(
        "nvme: " + path_ + ": the file system cannot reserve space (no fallocate) and has " +
        std::to_string(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) +
        " bytes free, less than the " + std::to_string(bytes - held) +
        " more the tier's file needs; lower the capacity or free space");
  }
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return FromErrno(errno, "ftruncate " + path_);
  if (log) {
    log->Log(LogLevel::kWarning, "nvme: " + path_ +
                                     ": fallocate is not supported; the file is sparse and its "
                                     "space is not reserved");
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
