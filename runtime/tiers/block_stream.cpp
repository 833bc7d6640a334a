#include "block_stream.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>

#include "strata/core/error.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

namespace strata::tiers {

namespace {
constexpr std::uint64_t page = 4096;        // O_DIRECT alignment
constexpr std::uint64_t max_gap = 64 << 10;  // tensors closer than this share a span (the gap is read too)
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

std::uint64_t ns_since(std::chrono::steady_clock::time_point t0) {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}
}  // namespace

void block_stream::free_aligned::operator()(std::byte* p) const noexcept { std::free(p); }

// The waker changes the guarded state, then bumps seq and reads sleepers; the sleeper counts
// itself in sleepers, then re-checks the state and sleeps only while seq is unchanged: either it
// sees the new state or the waker sees it (all seq_cst), so no wake-up is lost.
void block_stream::event::notify() noexcept {
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst)) kernels::cpu::detail::futex_wake_all(seq);
}

template <class Done>
void block_stream::event::wait_until(Done done) {
  while (!done()) {
    const std::uint32_t s = seq.load(std::memory_order_seq_cst);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!done()) kernels::cpu::detail::futex_wait(seq, s);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

block_stream::block_stream(const std::filesystem::path& file, std::vector<streamed_tensor> tensors, unsigned slots,
                           unsigned depth, std::size_t chunk_bytes, bool register_slots)
    : file_(file) {
  if (tensors.empty()) throw error("disk tier: no tensors to stream from '" + file.string() + "'");
  if (slots == 0) throw error("disk tier: the ring needs at least one slot");
  reader_ = std::make_unique<direct_reader>(file, depth, chunk_bytes);
  std::sort(tensors.begin(), tensors.end(), [](const streamed_tensor& a, const streamed_tensor& b) {
    return a.block != b.block ? a.block < b.block : a.file_offset < b.file_offset;
  });
  for (const streamed_tensor& t : tensors)
    if (t.file_offset > reader_->file_size() || t.bytes > reader_->file_size() - t.file_offset)
      throw error("disk tier: tensor '" + t.name + "' (" + std::to_string(t.bytes) + " bytes at offset " +
                  std::to_string(t.file_offset) + ") lies past the end of '" + file.string() + "' (" +
                  std::to_string(reader_->file_size()) + " bytes)");

  // Blocks and their spans, with each span's place in the slot (slot addresses come after the
  // slot size is known).
  struct span_at {
    std::uint64_t begin, end, slot_off;
  };
  std::vector<std::vector<span_at>> spans;
  std::vector<std::uint64_t> tensor_slot_off(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const streamed_tensor& t = tensors[i];
    if (blocks_.empty() || blocks_.back().il != t.block) {
      blocks_.push_back({t.block, {}, 0});
      spans.emplace_back();
    }
    auto& sp = spans.back();
    const std::uint64_t b = t.file_offset / page * page, e = (t.file_offset + t.bytes + page - 1) / page * page;
    if (!sp.empty() && b <= sp.back().end + max_gap && b >= sp.back().begin) {
      sp.back().end = std::max(sp.back().end, e);
    } else {
      const std::uint64_t off = sp.empty() ? 0 : sp.back().slot_off + (sp.back().end - sp.back().begin);
      sp.push_back({b, e, off});
    }
    tensor_slot_off[i] = sp.back().slot_off + (t.file_offset - sp.back().begin);
  }
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const auto& sp = spans[bi];
    blocks_[bi].bytes = sp.back().slot_off + (sp.back().end - sp.back().begin);
    slot_bytes_ = std::max<std::size_t>(slot_bytes_, blocks_[bi].bytes);
    block_ids_.push_back(blocks_[bi].il);
  }
  n_slots_ = std::min<std::size_t>(slots, blocks_.size());
  void* mem = nullptr;
  if (posix_memalign(&mem, page, n_slots_ * slot_bytes_) != 0)
    throw error("disk tier: out of memory for the ring (" + std::to_string(n_slots_) + " slots of " +
                std::to_string(slot_bytes_) + " bytes)");
  memory_.reset(static_cast<std::byte*>(mem));
  // The slots registered with the ring: reads into them skip the per-request page pinning
  // (plain reads if the kernel refuses, e.g. under a small RLIMIT_MEMLOCK).
  fixed_buffers_ = register_slots && reader_->register_memory({memory_.get(), n_slots_ * slot_bytes_});
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    std::byte* slot = memory_.get() + (bi % n_slots_) * slot_bytes_;
    for (const span_at& s : spans[bi]) blocks_[bi].spans.push_back({s.begin, s.end - s.begin, slot + s.slot_off});
  }
  std::size_t bi = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    while (blocks_[bi].il != tensors[i].block) ++bi;
    placed_.push_back({std::move(tensors[i]), memory_.get() + (bi % n_slots_) * slot_bytes_ + tensor_slot_off[i]});
  }
  index_.assign(block_ids_.back() + 1, -1);
  for (std::size_t b = 0; b < blocks_.size(); ++b) index_[blocks_[b].il] = int(b);

  loaded_ = std::make_unique<std::atomic<std::int64_t>[]>(n_slots_);
  for (std::size_t s = 0; s < n_slots_; ++s) loaded_[s].store(-1);
  thread_ = std::thread([this] { run_reader(); });
}

block_stream::~block_stream() {
  stop_.store(true, std::memory_order_seq_cst);
  released_event_.notify();
  if (thread_.joinable()) thread_.join();
}

const std::byte* block_stream::place(const gguf::tensor_info& t) {
  for (const placed& p : placed_) {
    if (p.t.name != t.name) continue;
    if (p.t.file_offset != t.file_offset || p.t.bytes != t.nbytes)
      throw error("disk tier: tensor '" + p.t.name + "' was planned at offset " + std::to_string(p.t.file_offset) + " (" +
                  std::to_string(p.t.bytes) + " bytes) but the file has it at " + std::to_string(t.file_offset) + " (" +
                  std::to_string(t.nbytes) + ")");
    return p.at;
  }
  return nullptr;
}

void block_stream::run_reader() {
  const auto k = std::int64_t(blocks_.size());
  std::vector<std::int64_t> occupant(n_slots_, -1);  // the item each slot holds (or is being read into)
  std::vector<std::int64_t> outstanding;              // items queued, not yet in
  std::int64_t next = 0;                              // the next item to queue
  bool busy = false;                                  // reads queued or in flight since busy_since
  auto busy_since = std::chrono::steady_clock::now();
  try {
    while (!stop_.load()) {
      // Queue every item whose slot is free (its previous item released by the compute thread):
      // the next block's reads go out while the current one's are in flight, so the drive's
      // queue does not drain at block boundaries.
      for (std::size_t s = slot_of(next); !stop_.load() && released_.load(std::memory_order_acquire) > occupant[s];
           s = slot_of(next)) {
        if (!busy) busy = true, busy_since = std::chrono::steady_clock::now();
        occupant[s] = next;
        outstanding.push_back(next);
        reader_->enqueue(blocks_[std::size_t(next % k)].spans, std::uint64_t(next));
        ++next;
      }
      if (reader_->idle()) {  // everything read: wait for the compute thread to free a slot
        if (busy) read_ns_.fetch_add(ns_since(busy_since), std::memory_order_relaxed), busy = false;
        const std::int64_t need = occupant[slot_of(next)];
        released_event_.wait_until([&] { return stop_.load() || released_.load(std::memory_order_seq_cst) > need; });
        continue;
      }
      const std::optional<std::uint64_t> done = reader_->poll();
      const auto now = std::chrono::steady_clock::now();  // busy time counted as it passes (stats() reads it)
      read_ns_.fetch_add(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - busy_since).count()),
                         std::memory_order_relaxed);
      busy_since = now;
      if (!done) continue;
      const auto n = std::int64_t(*done);
      std::erase(outstanding, n);
      bytes_read_.fetch_add(blocks_[std::size_t(n % k)].bytes, std::memory_order_relaxed);
      block_reads_.fetch_add(1, std::memory_order_relaxed);
      loaded_[slot_of(n)].store(n, std::memory_order_seq_cst);
      loaded_event_.notify();
    }
  } catch (const std::exception& e) {
    // The first item not in fails, and every later one; those before it were read.
    const std::int64_t n = outstanding.empty() ? next : *std::min_element(outstanding.begin(), outstanding.end());
    error_ = std::string("disk tier, block ") + std::to_string(blocks_[std::size_t(n % k)].il) + ": " + e.what();
    failed_item_.store(n, std::memory_order_release);
    for (std::size_t i = 0; i < n_slots_; ++i) loaded_[i].store(never, std::memory_order_seq_cst);
    loaded_event_.notify();
  }
  if (busy) read_ns_.fetch_add(ns_since(busy_since), std::memory_order_relaxed);
  // Stopping: reads still in flight write into the slots, which die with this object.
  try {
    while (!reader_->idle()) reader_->poll();
  } catch (const std::exception&) {  // poll() drained what was in flight before throwing
  }
}

void block_stream::wait_loaded(std::int64_t item) {
  std::atomic<std::int64_t>& slot = loaded_[slot_of(item)];
  if (slot.load(std::memory_order_acquire) < item) {
    const auto t0 = std::chrono::steady_clock::now();
    loaded_event_.wait_until([&] { return slot.load(std::memory_order_seq_cst) >= item; });
    stall_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
    stalls_.fetch_add(1, std::memory_order_relaxed);
  }
  if (item >= failed_item_.load(std::memory_order_acquire)) throw error(error_);
}

void block_stream::begin_step(std::size_t n_tokens) {
  steps_.fetch_add(1, std::memory_order_relaxed);
  tokens_.fetch_add(n_tokens, std::memory_order_relaxed);
}

void block_stream::begin_block(std::uint32_t il) {
  if (il >= index_.size() || index_[il] < 0) return;  // resident
  const auto k = std::int64_t(blocks_.size());
  // A step cut short (an error between blocks) leaves the reader's order behind: items up to
  // this block are waited for and released so the ring stays in step with the decoder.
  while (next_ % k != index_[il]) {
    wait_loaded(next_);
    released_.store(++next_, std::memory_order_seq_cst);
    released_event_.notify();
  }
  wait_loaded(next_);
}

void block_stream::end_block(std::uint32_t il) {
  if (il >= index_.size() || index_[il] < 0 || next_ % std::int64_t(blocks_.size()) != index_[il]) return;
  released_.store(++next_, std::memory_order_seq_cst);
  released_event_.notify();
}

block_stream_stats block_stream::stats() const {
  block_stream_stats s;
  s.blocks = std::uint32_t(blocks_.size());
  s.slots = std::uint32_t(n_slots_);
  s.slot_bytes = slot_bytes_;
  for (const block& b : blocks_) s.bytes_per_step += b.bytes;
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.block_reads = block_reads_.load(std::memory_order_relaxed);
  s.read_seconds = double(read_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.stall_seconds = double(stall_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.stalls = stalls_.load(std::memory_order_relaxed);
  s.steps = steps_.load(std::memory_order_relaxed);
  s.tokens = tokens_.load(std::memory_order_relaxed);
  s.fixed_buffers = fixed_buffers_;
  return s;
}

}  // namespace strata::tiers
