// The NVMe stores' lock descriptors, which a forked child lets go of.
//
// A DataFile's flock belongs to its open file description, and fork() shares
// that with the child: a worker forked without exec would keep the store
// locked after the parent closed it, and the parent's next open would be
// refused as "in use by another process" for as long as the worker runs.
// In the child, each lock descriptor listed here is pointed at /dev/null
// (dup2), which drops the child's hold on the lock and leaves the number
// taken, so nothing else in the child is closed by its later close().
#pragma once

namespace kvtier::internal {

// Lists `fd` (a locked descriptor). Up to 256 at once; past that a forked
// child keeps the lock, as before.
void ListLockFd(int fd);
// Takes `fd` off the list; call before closing it.
void UnlistLockFd(int fd);

}  // namespace kvtier::internal
