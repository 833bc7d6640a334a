#include "direct_reader.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::tiers {

namespace {
constexpr std::uint64_t align = 4096;  // O_DIRECT: offsets, lengths and buffers on 4 KiB
std::uint64_t down(std::uint64_t x) { return x / align * align; }
std::uint64_t up(std::uint64_t x) { return (x + align - 1) / align * align; }
}  // namespace

struct direct_reader::impl {
  std::filesystem::path path;
  int fd = -1;
  std::uint64_t size = 0;
  unsigned depth;
  std::size_t chunk;
  std::uint64_t gap;
  io_uring ring{};
  bool ring_ok = false;
  std::vector<void*> buffers;
  direct_reader_stats stats;

  struct in_flight {
    std::uint64_t off = 0, len = 0;
    std::size_t low = 0, high = 0;  // requests (sorted) this chunk may overlap
  };
  std::vector<in_flight> slots;

  ~impl() {
    if (ring_ok) io_uring_queue_exit(&ring);
    for (void* b : buffers) std::free(b);  // after the ring (and its registration) is gone
    if (fd >= 0) ::close(fd);
  }
  void register_buffers();
  std::string where(std::uint64_t off) const {
    std::string s(1, '\'');  // appended piece by piece: GCC 12's -Wrestrict false positive on "'" + string
    s += path.string();
    s += "' at offset ";
    s += std::to_string(off);
    return s;
  }
};

direct_reader::direct_reader(const std::filesystem::path& file, unsigned depth, std::size_t chunk_bytes,
                             std::uint64_t max_gap)
    : p_(std::make_unique<impl>()) {
  if (depth == 0 || chunk_bytes == 0 || chunk_bytes % align != 0)
    throw error("direct reader: depth must be > 0 and the chunk a multiple of 4096 bytes (got " +
                std::to_string(chunk_bytes) + ")");
  impl& p = *p_;
  p.path = file;
  p.depth = depth;
  p.chunk = chunk_bytes;
  p.gap = max_gap;
  p.fd = ::open(file.c_str(), O_RDONLY | O_DIRECT);
  if (p.fd < 0) {
    const int e = errno;
    std::string msg = "cannot open '" + file.string() + "' with O_DIRECT: " + std::strerror(e);
    if (e == EINVAL) msg += " (the file system has no direct I/O, e.g. tmpfs)";
    throw error(msg);
  }
  struct stat st {};
  if (::fstat(p.fd, &st) != 0) throw error("cannot stat '" + file.string() + "': " + std::strerror(errno));
  p.size = std::uint64_t(st.st_size);
  if (const int rc = io_uring_queue_init(depth, &p.ring, 0); rc < 0)
    throw error(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
  p.ring_ok = true;
  p.slots.resize(depth);
}

void direct_reader::impl::register_buffers() {
  if (!buffers.empty()) return;
  std::vector<iovec> iov(depth);
  buffers.assign(depth, nullptr);
  for (unsigned i = 0; i < depth; ++i) {
    if (posix_memalign(&buffers[i], align, chunk) != 0) throw error("direct reader: out of memory for buffers");
    iov[i] = {buffers[i], chunk};
  }
  if (const int rc = io_uring_register_buffers(&ring, iov.data(), depth); rc < 0)
    throw error(std::string("io_uring_register_buffers failed (RLIMIT_MEMLOCK?): ") + std::strerror(-rc));
}

direct_reader::~direct_reader() = default;

std::uint64_t direct_reader::file_size() const noexcept { return p_->size; }
const direct_reader_stats& direct_reader::stats() const noexcept { return p_->stats; }

void direct_reader::read(std::span<direct_read> reads) {
  impl& p = *p_;
  p.register_buffers();
  for (const direct_read& r : reads)
    if (r.offset > p.size || r.bytes > p.size - r.offset)
      throw error("direct reader: " + std::to_string(r.bytes) + " bytes at offset " + std::to_string(r.offset) +
                  " are past the end of '" + p.path.string() + "' (" + std::to_string(p.size) + " bytes)");
  std::sort(reads.begin(), reads.end(), [](const direct_read& a, const direct_read& b) { return a.offset < b.offset; });

  // Coalesced spans [begin, end) (aligned) over the sorted requests [first, last).
  struct span_t {
    std::uint64_t begin, end;
    std::size_t first, last;
  };
  std::vector<span_t> spans;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].bytes == 0) continue;
    const std::uint64_t b = down(reads[i].offset), e = up(reads[i].offset + reads[i].bytes);
    if (!spans.empty() && b <= spans.back().end + p.gap) {
      spans.back().end = std::max(spans.back().end, e);
      spans.back().last = i + 1;
    } else {
      spans.push_back({b, e, i, i + 1});
    }
  }
  p.stats.spans += spans.size();

  std::vector<unsigned> free_slots;
  for (unsigned s = p.depth; s-- > 0;) free_slots.push_back(s);
  std::size_t si = 0;                               // span being issued
  std::uint64_t next_off = spans.empty() ? 0 : spans[0].begin;
  std::size_t low = spans.empty() ? 0 : spans[0].first;  // first request not yet behind next_off
  unsigned in_flight = 0;
  std::string failure;

  const auto issue = [&] {
    while (failure.empty() && si < spans.size() && !free_slots.empty()) {
      const span_t& sp = spans[si];
      const unsigned s = free_slots.back();
      free_slots.pop_back();
      const std::uint64_t len = std::min<std::uint64_t>(p.chunk, sp.end - next_off);
      // Requests ending at or before this chunk are done with (ends increase for the
      // non-overlapping tensors of a file; overlapping requests keep low where it is).
      while (low < sp.last && reads[low].offset + reads[low].bytes <= next_off) ++low;
      p.slots[s] = {next_off, len, low, sp.last};
      io_uring_sqe* sqe = io_uring_get_sqe(&p.ring);
      io_uring_prep_read_fixed(sqe, p.fd, p.buffers[s], unsigned(len), next_off, int(s));
      io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(std::uintptr_t(s)));
      ++in_flight;
      ++p.stats.chunks;
      next_off += len;
      if (next_off >= sp.end && ++si < spans.size()) {
        next_off = spans[si].begin;
        low = spans[si].first;
      }
    }
    if (in_flight) io_uring_submit(&p.ring);
  };

  issue();
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (const int rc = io_uring_wait_cqe(&p.ring, &cqe); rc < 0) {
      failure = std::string("io_uring_wait_cqe: ") + std::strerror(-rc);
      break;  // nothing more will complete that we could wait for reliably
    }
    const int res = cqe->res;
    const unsigned s = unsigned(reinterpret_cast<std::uintptr_t>(io_uring_cqe_get_data(cqe)));
    io_uring_cqe_seen(&p.ring, cqe);
    --in_flight;
    const impl::in_flight& c = p.slots[s];
    const std::uint64_t expected = std::min(c.len, p.size - c.off);
    if (res < 0 && failure.empty()) failure = std::string(std::strerror(-res)) + " reading " + p.where(c.off);
    else if (res >= 0 && std::uint64_t(res) < expected && failure.empty())
      failure = "short read (" + std::to_string(res) + " of " + std::to_string(expected) + " bytes) of " + p.where(c.off);
    if (failure.empty()) {
      p.stats.bytes_from_disk += std::uint64_t(res);
      const std::uint64_t c_end = c.off + std::uint64_t(res);
      const auto* src = static_cast<const std::byte*>(p.buffers[s]);
      for (std::size_t i = c.low; i < c.high && reads[i].offset < c_end; ++i) {
        const std::uint64_t b = std::max(reads[i].offset, c.off), e = std::min(reads[i].offset + reads[i].bytes, c_end);
        if (b >= e) continue;
        std::memcpy(reads[i].dst + (b - reads[i].offset), src + (b - c.off), e - b);
        p.stats.bytes_delivered += e - b;
      }
    }
    free_slots.push_back(s);
    issue();
  }
  if (!failure.empty()) throw error("direct reader: " + failure);
}

void direct_reader::read_direct(std::span<const direct_read> spans) {
  impl& p = *p_;
  for (const direct_read& r : spans) {
    if (r.offset % align || r.bytes % align || reinterpret_cast<std::uintptr_t>(r.dst) % align)
      throw error("direct reader: span of " + std::to_string(r.bytes) + " bytes at offset " + std::to_string(r.offset) +
                  " of '" + p.path.string() + "' is not 4096-aligned (offset, length and destination)");
    if (r.bytes && r.offset >= p.size)
      throw error("direct reader: span at offset " + std::to_string(r.offset) + " starts past the end of '" +
                  p.path.string() + "' (" + std::to_string(p.size) + " bytes)");
  }
  struct pending {
    std::uint64_t off, len;
  };
  std::size_t si = 0;          // span being issued
  std::uint64_t done = 0;      // bytes of spans[si] issued
  unsigned in_flight = 0;
  std::string failure;
  const auto issue = [&] {
    unsigned added = 0;
    while (failure.empty() && in_flight < p.depth && si < spans.size()) {
      const direct_read& r = spans[si];
      if (done >= r.bytes || r.offset + done >= p.size) {  // span finished (or the rest lies past the end)
        ++si;
        done = 0;
        continue;
      }
      const std::uint64_t len = std::min<std::uint64_t>(p.chunk, r.bytes - done);
      io_uring_sqe* sqe = io_uring_get_sqe(&p.ring);
      io_uring_prep_read(sqe, p.fd, r.dst + done, unsigned(len), r.offset + done);
      // The chunk's offset and length (4 KiB units) travel as the user data (checked below).
      io_uring_sqe_set_data64(sqe, ((r.offset + done) >> 12) << 20 | (len >> 12));
      done += len;
      ++in_flight;
      ++added;
      ++p.stats.chunks;
    }
    if (added) io_uring_submit(&p.ring);
  };
  if (!spans.empty() && p.size >> 12 >= (1ull << 44)) throw error("direct reader: '" + p.path.string() + "' is too large");
  if (p.chunk >> 12 >= (1u << 20)) throw error("direct reader: chunk too large for read_direct");
  issue();
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (const int rc = io_uring_wait_cqe(&p.ring, &cqe); rc < 0) {
      failure = std::string("io_uring_wait_cqe: ") + std::strerror(-rc);
      break;
    }
    const int res = cqe->res;
    const std::uint64_t data = io_uring_cqe_get_data64(cqe);
    io_uring_cqe_seen(&p.ring, cqe);
    --in_flight;
    const pending c{(data >> 20) << 12, (data & ((1u << 20) - 1)) << 12};
    const std::uint64_t expected = std::min(c.len, p.size - std::min(c.off, p.size));
    if (res < 0 && failure.empty()) failure = std::string(std::strerror(-res)) + " reading " + p.where(c.off);
    else if (res >= 0 && std::uint64_t(res) < expected && failure.empty())
      failure = "short read (" + std::to_string(res) + " of " + std::to_string(expected) + " bytes) of " + p.where(c.off) +
                " (the file is shorter than when it was opened?)";
    if (res > 0) p.stats.bytes_from_disk += std::uint64_t(res), p.stats.bytes_delivered += std::uint64_t(res);
    issue();
  }
  if (!failure.empty()) throw error("direct reader: " + failure);
}

}  // namespace strata::tiers
