#include "tiers/nvme/nvme_offline.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "kvtier/block_header.h"

namespace kvtier::internal {

NvmeOfflineStore::NvmeOfflineStore(int fd, std::unique_ptr<NvmeIndex> index, StoreMeta meta,
                                   std::string dir)
    : fd_(fd), index_(std::move(index)), meta_(meta), index_dir_(std::move(dir)) {}

NvmeOfflineStore::~NvmeOfflineStore() {
  index_.reset();
  if (fd_ >= 0) close(fd_);  // releases the shared lock
}

Result<std::unique_ptr<NvmeOfflineStore>> NvmeOfflineStore::Open(const std::string& data_path,
                                                                 const std::string& index_dir,
                                                                 bool ignore_lock) {
  const int fd = open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no nvme data file at " + data_path);
    return FromErrno(errno, "open " + data_path);
  }
  // The lock is taken before the index is read, so a tier cannot open the
  // store in between; it goes with the descriptor.
  if (!ignore_lock && flock(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return Status::Unavailable("nvme store " + data_path + " is held by a live process");
    }
    return FromErrno(err, "flock " + data_path);
  }
  const std::string dir = index_dir.empty() ? data_path + ".index" : index_dir;
  StoreMeta meta;
  auto index = NvmeIndex::OpenReadOnly(dir, &meta);
  if (!index.ok()) {
    close(fd);
    return index.status();
  }
  auto store = std::unique_ptr<NvmeOfflineStore>(
      new NvmeOfflineStore(fd, std::move(index).value(), meta, dir));
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) store->file_size_ = st.st_size;
  return store;
}

Status NvmeOfflineStore::Scan(
    const std::function<void(uint32_t, uint64_t)>& on_region,
    const std::function<void(const NsKey&, const BlockLocation&)>& on_block,
    uint64_t* bad_records) const {
  return index_->Scan(on_region, on_block, bad_records);
}

Status NvmeOfflineStore::ReadAt(const BlockLocation& loc, AlignedBuffer& buf) const {
  if (!LocationFits(loc, meta_.block_bytes, meta_.region_bytes, meta_.regions)) {
    return Status::Corruption("index entry does not fit the store's geometry");
  }
  uint64_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = pread(fd_, buf.data() + done, buf.size() - done,
                            static_cast<off_t>(FileOffset(loc) + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FromErrno(errno, "pread");
    if (n == 0) return Status::IOError("short read: the data file ends inside the block");
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status NvmeOfflineStore::VerifyHeader(const NsKey& id, const BlockLocation& loc) const {
  AlignedBuffer buf(kNvmeAlign);
  KVTIER_RETURN_IF_ERROR(ReadAt(loc, buf));
  return HeaderMatching(buf.span(), id, loc).status();
}

Status NvmeOfflineStore::VerifyBlock(const NsKey& id, const BlockLocation& loc) const {
  AlignedBuffer buf(DiskBytes(loc.payload_bytes));
  KVTIER_RETURN_IF_ERROR(ReadAt(loc, buf));
  KVTIER_ASSIGN_OR_RETURN(BlockHeader h, HeaderMatching(buf.span(), id, loc));
  return kvtier::VerifyBlock(h, id.ns, id.key, buf.span().subspan(kNvmeAlign, loc.payload_bytes));
}

}  // namespace kvtier::internal
