// Allocation failures on demand, for the binaries that link alloc_failure.cc:
// it replaces the global operator new, so that an armed allocation throws
// std::bad_alloc on whichever thread makes it.
#pragma once

namespace kvtier::testing {

// The n-th allocation from now (0: the next one) throws, once.
void FailAllocationAfter(long n);
// Every allocation throws until DisarmAllocationFailures().
void FailEveryAllocation();
// Every n-th allocation (n >= 1) throws until DisarmAllocationFailures().
void FailEveryNthAllocation(long n);
// Every allocation on the calling thread throws while `on` (other threads
// are not touched), until called again with false.
void FailAllocationsOnThisThread(bool on);
// The n-th allocation the calling thread makes from now throws, once; other
// threads are not touched (a library that cannot take a failed allocation
// may run on them).
void FailAllocationAfterOnThisThread(long n);
// Allocations succeed again (this thread's countdown included). Returns whether one was failed
// since arming.
bool DisarmAllocationFailures();

}  // namespace kvtier::testing
