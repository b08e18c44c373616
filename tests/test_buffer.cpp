// test_buffer.cpp — kvrun::Buffer (ggml-like/tensor.h): alignment, zeroed memory, and the
// transparent-huge-page request (set_huge_pages) as Linux reports it in /proc/self/smaps.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tensor.h"

namespace kvrun {
namespace {

/// The THP mode of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or
/// "never": the bracketed word), or nullopt where the file is missing (no THP in this kernel).
std::optional<std::string> thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  const size_t b = line.find('['), e = line.find(']');
  if (b == std::string::npos || e == std::string::npos || e < b) return std::nullopt;
  return line.substr(b + 1, e - b - 1);
}

/// The THPeligible value of the /proc/self/smaps mapping that holds `p` (nullopt: no such
/// mapping or field, e.g. a kernel older than 4.19).
std::optional<int> thp_eligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;  // a mapping's header line: "lo-hi perms offset dev inode"
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return std::nullopt;
}

TEST(Buffer, SmallBuffersAre64ByteAlignedAndZeroed) {
  Buffer b(1000);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  const auto* bytes = static_cast<const uint8_t*>(b.data());
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
}

// From 2 MiB up with huge pages on, the start is 2 MiB aligned and the mapping is eligible for
// THP (the madvise took); with them off it is only 64-byte aligned, and under THP "madvise"
// (the kernel's default setting) not eligible. Contents are zero either way.
TEST(Buffer, LargeBuffersAskForHugePagesOnlyWhenOn) {
  const bool was = huge_pages();
  const size_t n = 3 * kHugePageBytes + 4096;
  set_huge_pages(true);
  Buffer on(n);
  set_huge_pages(false);
  Buffer off(n);
  set_huge_pages(was);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(on.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(off.data()) % 64, 0u);
  for (const Buffer* b : {&on, &off}) {
    const auto* bytes = static_cast<const uint8_t*>(b->data());
    for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(bytes[i], 0) << i;
    ASSERT_EQ(bytes[n - 1], 0);
  }
  const std::optional<std::string> mode = thp_mode();
  if (!mode || *mode == "never")
    GTEST_SKIP() << "THP is " << (mode ? "off (never)" : "absent") << " in this kernel: "
                 << "the smaps check needs it";
  const std::optional<int> e_on = thp_eligible(on.data()), e_off = thp_eligible(off.data());
  if (!e_on || !e_off) GTEST_SKIP() << "/proc/self/smaps has no THPeligible field";
  EXPECT_EQ(*e_on, 1);
  if (*mode == "madvise") {
    EXPECT_EQ(*e_off, 0);
  }
}

}  // namespace
}  // namespace kvrun
