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
#include <deque>
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
  std::byte* fixed = nullptr;  // register_memory()'s region: buffer index 0 of the ring's table
  std::size_t fixed_bytes = 0;
  direct_reader_stats stats;

  struct in_flight {
    std::uint64_t off = 0, len = 0;
    std::size_t low = 0, high = 0;  // requests (sorted) this chunk may overlap
  };
  std::vector<in_flight> slots;

  // read_direct / enqueue: batches of aligned spans in order, chunks in flight by record.
  struct batch {
    std::span<const direct_read> spans;
    std::uint64_t tag;
    std::size_t span;    // next span to issue from
    std::uint64_t done;  // bytes of that span issued
    unsigned in_flight;  // chunks of this batch in flight
  };
  struct direct_chunk {
    std::uint64_t off = 0, len = 0, tag = 0;  // len 0: record free
  };
  std::deque<batch> batches;
  std::vector<direct_chunk> direct_slots;
  unsigned direct_in_flight = 0;
  void issue_direct();

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
  p.direct_slots.resize(depth);
}

void direct_reader::impl::register_buffers() {
  if (!buffers.empty()) return;
  if (fixed) throw error("direct reader: read() after register_memory() on '" + path.string() + "'");
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

bool direct_reader::enqueue(std::span<const direct_read> spans, std::uint64_t tag) {
  impl& p = *p_;
  for (const direct_read& r : spans) {
    if (r.offset % align || r.bytes % align || reinterpret_cast<std::uintptr_t>(r.dst) % align)
      throw error("direct reader: span of " + std::to_string(r.bytes) + " bytes at offset " + std::to_string(r.offset) +
                  " of '" + p.path.string() + "' is not 4096-aligned (offset, length and destination)");
    if (r.bytes && r.offset >= p.size)
      throw error("direct reader: span at offset " + std::to_string(r.offset) + " starts past the end of '" +
                  p.path.string() + "' (" + std::to_string(p.size) + " bytes)");
  }
  bool any = false;
  for (const direct_read& r : spans) any = any || r.bytes;
  if (!any) return false;  // nothing to read: complete now
  p.batches.push_back({spans, tag, 0, 0, 0});
  p.issue_direct();
  return true;
}

bool direct_reader::idle() const noexcept { return p_->batches.empty(); }

bool direct_reader::register_memory(std::span<std::byte> memory) {
  impl& p = *p_;
  if (p.fixed || !p.buffers.empty())
    throw error("direct reader: memory registered twice, or beside read()'s buffers, on '" + p.path.string() + "'");
  if (memory.empty() || reinterpret_cast<std::uintptr_t>(memory.data()) % align || memory.size() % align)
    throw error("direct reader: registered memory must be non-empty and 4096-aligned (" + std::to_string(memory.size()) +
                " bytes)");
  const iovec iov{memory.data(), memory.size()};
  if (io_uring_register_buffers(&p.ring, &iov, 1) < 0) return false;
  p.fixed = memory.data();
  p.fixed_bytes = memory.size();
  return true;
}

void direct_reader::impl::issue_direct() {
  unsigned added = 0;
  for (batch& b : batches) {  // in order: a later batch's chunks go out once the earlier ones' are all out
    while (direct_in_flight < depth && b.span < b.spans.size()) {
      const direct_read& r = b.spans[b.span];
      if (b.done >= r.bytes || r.offset + b.done >= size) {  // span finished (or the rest lies past the end)
        ++b.span;
        b.done = 0;
        continue;
      }
      const std::uint64_t len = std::min<std::uint64_t>(chunk, r.bytes - b.done);
      unsigned s = 0;
      while (direct_slots[s].len) ++s;  // a free record (fewer than depth are in flight)
      direct_slots[s] = {r.offset + b.done, len, b.tag};
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      std::byte* dst = r.dst + b.done;
      if (fixed && dst >= fixed && dst + len <= fixed + fixed_bytes) {
        io_uring_prep_read_fixed(sqe, fd, dst, unsigned(len), r.offset + b.done, 0);
        ++stats.fixed_chunks;
      } else {
        io_uring_prep_read(sqe, fd, dst, unsigned(len), r.offset + b.done);
      }
      io_uring_sqe_set_data64(sqe, s);
      b.done += len;
      ++b.in_flight;
      ++direct_in_flight;
      ++added;
      ++stats.chunks;
    }
    if (direct_in_flight >= depth) break;
  }
  if (added) io_uring_submit(&ring);
}

std::optional<std::uint64_t> direct_reader::poll() {
  impl& p = *p_;
  if (p.batches.empty()) return std::nullopt;
  io_uring_cqe* cqe = nullptr;
  if (const int rc = io_uring_wait_cqe(&p.ring, &cqe); rc < 0)
    throw error(std::string("direct reader: io_uring_wait_cqe: ") + std::strerror(-rc));
  const int res = cqe->res;
  const auto s = unsigned(io_uring_cqe_get_data64(cqe));
  io_uring_cqe_seen(&p.ring, cqe);
  const impl::direct_chunk c = p.direct_slots[s];
  p.direct_slots[s].len = 0;
  --p.direct_in_flight;
  const std::uint64_t expected = std::min(c.len, p.size - std::min(c.off, p.size));
  std::string failure;
  if (res < 0) failure = std::string(std::strerror(-res)) + " reading " + p.where(c.off);
  else if (std::uint64_t(res) < expected)
    failure = "short read (" + std::to_string(res) + " of " + std::to_string(expected) + " bytes) of " + p.where(c.off) +
              " (the file is shorter than when it was opened?)";
  if (!failure.empty()) {
    // Drain what is in flight (its memory is the caller's), then forget every batch.
    while (p.direct_in_flight > 0) {
      if (io_uring_wait_cqe(&p.ring, &cqe) < 0) break;
      p.direct_slots[unsigned(io_uring_cqe_get_data64(cqe))].len = 0;
      io_uring_cqe_seen(&p.ring, cqe);
      --p.direct_in_flight;
    }
    p.batches.clear();
    throw error("direct reader: " + failure);
  }
  p.stats.bytes_from_disk += std::uint64_t(res);
  p.stats.bytes_delivered += std::uint64_t(res);
  std::optional<std::uint64_t> finished;
  for (auto it = p.batches.begin(); it != p.batches.end(); ++it) {
    if (it->tag != c.tag) continue;
    --it->in_flight;
    if (it->in_flight == 0 && it->span >= it->spans.size()) {
      finished = it->tag;
      p.batches.erase(it);
    }
    break;
  }
  p.issue_direct();
  return finished;
}

void direct_reader::read_direct(std::span<const direct_read> spans) {
  if (!idle()) throw error("direct reader: read_direct while batches are queued");
  if (enqueue(spans, 0))
    while (!idle()) poll();
}

}  // namespace strata::tiers
