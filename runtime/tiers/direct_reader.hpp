// Reads byte ranges of one file (weights of a disk-backed tier, issue 14 item 5) with O_DIRECT
// through io_uring, bypassing the page cache: ranges are sorted and coalesced when they are at
// most `max_gap` apart, each coalesced span is read in aligned chunks into buffers registered
// with the ring (IORING_OP_READ_FIXED), up to `depth` chunks in flight, and each chunk's bytes
// are copied to the requests it overlaps. read_direct() skips the copy: aligned spans go
// straight into aligned memory (the disk tier's ring slots, runtime/tiers/block_stream.hpp).
// Not thread-safe: one thread at a time (the reader may be made on one thread and used on another).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace strata::tiers {

struct direct_read {
  std::uint64_t offset = 0;  // in the file
  std::uint64_t bytes = 0;
  std::byte* dst = nullptr;  // any alignment
};

struct direct_reader_stats {
  std::uint64_t bytes_from_disk = 0;  // aligned chunk bytes the drive delivered
  std::uint64_t bytes_delivered = 0;  // requested bytes copied out
  std::uint64_t chunks = 0;           // read operations submitted
  std::uint64_t spans = 0;            // coalesced spans
  std::uint64_t fixed_chunks = 0;     // chunks read into registered memory (IORING_OP_READ_FIXED)
};

class direct_reader {
 public:
  // Throws strata::error naming the file when it cannot be opened with O_DIRECT (a file system
  // without direct I/O, such as tmpfs, says so) or the ring cannot be set up. The bounce
  // buffers of read() are allocated and registered at its first call.
  explicit direct_reader(const std::filesystem::path& file, unsigned depth = 32, std::size_t chunk_bytes = 1 << 20,
                         std::uint64_t max_gap = 64 << 10);
  ~direct_reader();
  direct_reader(const direct_reader&) = delete;
  direct_reader& operator=(const direct_reader&) = delete;

  // Fills every request's dst; returns when all are done. Throws naming the file and offset on
  // an I/O error, a read past the end of the file or a short read. `reads` may be reordered.
  void read(std::span<direct_read> reads);

  // Reads each span [offset, offset + bytes) into dst with no copy: offset, bytes and dst must
  // be multiples of 4096 (else an error naming the span). The file's end may fall inside a span
  // (its last bytes are then left as they were); a span starting past the end, an I/O error or a
  // short read before the end throws naming the file and offset. Up to `depth` chunks in flight.
  void read_direct(std::span<const direct_read> spans);
  // read_direct in pieces, so reads of consecutive batches overlap (the disk tier queues the
  // next block before the current one is in): enqueue() checks the spans as read_direct does and
  // issues chunks while fewer than `depth` are in flight (batches in order); poll() waits for one
  // chunk, issues more, and returns the tag of the batch that chunk completed, if it did. The
  // spans' memory must stay valid until their batch completes; enqueue() returns false (and the
  // batch is complete) when the spans hold no bytes. On an error poll() waits for the chunks in
  // flight, drops every batch and throws naming the file and offset. Not with read().
  bool enqueue(std::span<const direct_read> spans, std::uint64_t tag);
  std::optional<std::uint64_t> poll();
  bool idle() const noexcept;  // no batch queued or in flight

  // Registers `memory` (4096-aligned start and length) with the ring: chunks of read_direct /
  // enqueue that land inside it are then read with IORING_OP_READ_FIXED, so the kernel does not
  // pin the destination pages for every request. Returns false and registers nothing when the
  // kernel refuses (RLIMIT_MEMLOCK, an old kernel): the reads stay plain. Once, and not with read().
  bool register_memory(std::span<std::byte> memory);

  std::uint64_t file_size() const noexcept;
  const direct_reader_stats& stats() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace strata::tiers
