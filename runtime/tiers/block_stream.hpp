// The disk tier's ring (issue 14 item 5): the tensors of disk-backed decoder blocks are not kept
// in RAM; a reader thread reads each block's bytes from the model file with O_DIRECT through
// io_uring (direct_reader::enqueue/poll: the block's tensors coalesced into aligned spans, read
// straight into a slot, 32 chunks in flight, the next block's chunks queued behind the current
// one's so the drive's queue never drains between blocks) into a ring of slots, one block ahead
// of the compute thread, which runs the block from the slot (kernels/cpu/weight_stream.hpp).
//
// Block i of the streamed blocks (in layer order) always lives in slot i % slots, so every
// tensor has one address for the stream's lifetime (the CPU backend's weights point there). The
// reader queues items n = 0, 1, 2, ... (block n % k of k, wrapping into the next step) in order,
// each once the previous occupant of its slot has been released by end_block(); the compute
// thread waits in begin_block() only when its block is not in yet (counted as stall time).
// The handshake is two counters with a futex each (a system call only when the other side
// sleeps); nothing on the compute thread allocates, locks or makes a system call otherwise.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "direct_reader.hpp"
#include "strata/kernels/cpu/weight_stream.hpp"

namespace strata::tiers {

struct streamed_tensor {
  std::string name;
  std::uint32_t block = 0;  // decoder block (layer) index
  std::uint64_t file_offset = 0, bytes = 0;
};

struct block_stream_stats {
  std::uint32_t blocks = 0, slots = 0;
  std::uint64_t slot_bytes = 0;          // bytes of one slot (the largest block's aligned spans)
  std::uint64_t bytes_per_step = 0;      // aligned bytes read for one pass over the blocks
  std::uint64_t bytes_read = 0;          // from the drive since the start
  std::uint64_t block_reads = 0;
  double read_seconds = 0;               // the reader busy: wall time with reads queued or in flight
  double stall_seconds = 0;              // the compute thread waiting for a block
  std::uint64_t stalls = 0;              // begin_block() calls that had to wait
  std::uint64_t steps = 0, tokens = 0;   // steps begun and their tokens
  bool fixed_buffers = false;            // the slots are registered with the ring (READ_FIXED)
  double read_gbps() const noexcept { return read_seconds > 0 ? double(bytes_read) / read_seconds / 1e9 : 0.0; }
};

class block_stream final : public kernels::cpu::weight_stream {
 public:
  // Opens `file` with O_DIRECT (throws naming it when the file system has no direct I/O) and
  // starts the reader on the first block. `tensors` are the streamed tensors (any order);
  // slots >= 1 (fewer are used when there are fewer blocks). register_slots: the slots are
  // registered with the ring (READ_FIXED) where the kernel allows it.
  block_stream(const std::filesystem::path& file, std::vector<streamed_tensor> tensors, unsigned slots = 2,
               unsigned depth = 32, std::size_t chunk_bytes = 1 << 20, bool register_slots = true);
  ~block_stream() override;
  block_stream(const block_stream&) = delete;
  block_stream& operator=(const block_stream&) = delete;

  const std::byte* place(const gguf::tensor_info& t) override;
  void begin_step(std::size_t n_tokens) override;
  void begin_block(std::uint32_t il) override;
  void end_block(std::uint32_t il) override;

  block_stream_stats stats() const;
  const std::vector<std::uint32_t>& blocks() const noexcept { return block_ids_; }
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  struct block {
    std::uint32_t il = 0;
    std::vector<direct_read> spans;  // aligned file spans -> aligned slot memory
    std::uint64_t bytes = 0;
  };
  struct placed {
    streamed_tensor t;
    const std::byte* at = nullptr;
  };
  void run_reader();
  void wait_loaded(std::int64_t item);
  std::size_t slot_of(std::int64_t item) const noexcept { return std::size_t(item % std::int64_t(blocks_.size())) % n_slots_; }

  std::filesystem::path file_;
  std::unique_ptr<direct_reader> reader_;
  std::vector<block> blocks_;
  std::vector<std::uint32_t> block_ids_;
  std::vector<int> index_;  // per layer: its position in blocks_, or -1
  std::vector<placed> placed_;
  std::size_t n_slots_ = 0, slot_bytes_ = 0;
  struct free_aligned {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, free_aligned> memory_;

  // A 32-bit futex word bumped on every change of what it guards, woken only when a thread
  // sleeps on it (std::atomic::wait is avoided: libstdc++ runs 64-bit words through a shared
  // proxy counter; kernels/cpu/thread_pool.hpp).
  struct event {
    std::atomic<std::uint32_t> seq{0}, sleepers{0};
    void notify() noexcept;
    template <class Done>
    void wait_until(Done done);
  };
  // The handshake: loaded_[s] = the last item read into slot s (event loaded_event_); released_ =
  // items the compute thread is done with, released in order (event released_event_).
  std::unique_ptr<std::atomic<std::int64_t>[]> loaded_;
  std::atomic<std::int64_t> released_{0};
  event loaded_event_, released_event_;
  std::int64_t next_ = 0;  // compute thread: the item its next block is
  std::atomic<bool> stop_{false};
  bool fixed_buffers_ = false;  // register_memory() took the slots
  // The item the reader failed on (it stops there): items before it were read, those from it
  // on throw error_ (written before failed_item_ is set).
  std::atomic<std::int64_t> failed_item_{std::numeric_limits<std::int64_t>::max()};
  std::string error_;

  std::atomic<std::uint64_t> bytes_read_{0}, block_reads_{0}, read_ns_{0}, stall_ns_{0}, stalls_{0}, steps_{0}, tokens_{0};
  std::thread thread_;
};

}  // namespace strata::tiers
