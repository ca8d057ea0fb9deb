#include "kvtier/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <new>
#include <stdexcept>

namespace kvtier {
namespace {

TEST(Status, OkIsCheapAndPrintsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_TRUE(s.WithContext("x").ok());
  EXPECT_TRUE(Status(StatusCode::kOk, "ignored").message().empty());
}

TEST(Status, AMovedFromStatusIsOk) {
  Status a = Status::IOError("disk");
  Status b = std::move(a);
  EXPECT_TRUE(a.ok());  // NOLINT(bugprone-use-after-move): the documented state
  EXPECT_EQ(a.ToString(), "ok");
  EXPECT_EQ(b.ToString(), "io_error: disk");
  Status c = Status::Busy("queue");
  c = std::move(b);
  EXPECT_TRUE(b.ok());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.ToString(), "io_error: disk");
  Status empty(StatusCode::kCancelled, "");
  EXPECT_EQ(empty.ToString(), "cancelled: ");
  EXPECT_EQ(Status(empty).code(), StatusCode::kCancelled);
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status s = Status::Corruption("bad checksum");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "corruption: bad checksum");
  Status c = s.WithContext("tier 'nvme'");
  EXPECT_EQ(c.code(), StatusCode::kCorruption);
  EXPECT_EQ(c.message(), "tier 'nvme': bad checksum");
  Status copy = c;
  EXPECT_EQ(copy.ToString(), c.ToString());
}

TEST(Status, FromErrnoMapsCodesAndNamesTheOperation) {
  EXPECT_EQ(FromErrno(ENOSPC, "nvme write").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(FromErrno(ECONNREFUSED, "connect").code(), StatusCode::kUnavailable);
  EXPECT_EQ(FromErrno(EIO, "nvme read").ToString(), "io_error: nvme read: Input/output error");
}

TEST(Status, DescribedStatusFallsBackToTheFixedMessageWhenDescribingThrows) {
  const Status detailed = DescribedStatus(StatusCode::kIOError, "read failed",
                                          [] { return Status::IOError("read failed: block 7"); });
  EXPECT_EQ(detailed.ToString(), "io_error: read failed: block 7");
  const Status fixed = DescribedStatus(StatusCode::kIOError, "read failed",
                                       []() -> Status { throw std::bad_alloc(); });
  EXPECT_EQ(fixed.ToString(), "io_error: read failed");
  const Status other = DescribedStatus(StatusCode::kInternal, "threw",
                                       []() -> Status { throw std::length_error("too long"); });
  EXPECT_EQ(other.ToString(), "internal: threw");
}

TEST(Result, HoldsValueOrError) {
  Result<int> v(7);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  Result<int> e(Status::NotFound("nope"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  Result<int> bad{Status::Ok()};  // never OK without a value
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kvtier
