#include "block_stream.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>

#include "strata/core/error.hpp"

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

block_stream::block_stream(const std::filesystem::path& file, std::vector<streamed_tensor> tensors, unsigned slots,
                           unsigned depth, std::size_t chunk_bytes)
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
  stop_.store(true);
  released_.store(never);
  released_.notify_all();
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
  std::vector<std::int64_t> occupant(n_slots_, -1);  // the item each slot holds
  for (std::int64_t n = 0;; ++n) {
    const std::size_t s = slot_of(n);
    // The slot's previous item must be released (its block's compute done) before it is overwritten.
    for (std::int64_t r = released_.load(std::memory_order_acquire); r <= occupant[s];
         r = released_.load(std::memory_order_acquire)) {
      if (stop_.load()) return;
      released_.wait(r, std::memory_order_acquire);
    }
    if (stop_.load()) return;
    const block& b = blocks_[std::size_t(n % std::int64_t(blocks_.size()))];
    const auto t0 = std::chrono::steady_clock::now();
    try {
      reader_->read_direct(b.spans);
    } catch (const std::exception& e) {
      error_ = std::string("disk tier, block ") + std::to_string(b.il) + ": " + e.what();
      failed_item_.store(n, std::memory_order_release);
      for (std::size_t i = 0; i < n_slots_; ++i) {
        loaded_[i].store(never, std::memory_order_release);
        loaded_[i].notify_all();
      }
      return;
    }
    read_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
    bytes_read_.fetch_add(b.bytes, std::memory_order_relaxed);
    block_reads_.fetch_add(1, std::memory_order_relaxed);
    occupant[s] = n;
    loaded_[s].store(n, std::memory_order_release);
    loaded_[s].notify_one();
  }
}

void block_stream::wait_loaded(std::int64_t item) {
  std::atomic<std::int64_t>& slot = loaded_[slot_of(item)];
  std::int64_t v = slot.load(std::memory_order_acquire);
  if (v < item) {
    const auto t0 = std::chrono::steady_clock::now();
    do {
      slot.wait(v, std::memory_order_acquire);
      v = slot.load(std::memory_order_acquire);
    } while (v < item);
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
    released_.store(++next_, std::memory_order_release);
    released_.notify_one();
  }
  wait_loaded(next_);
}

void block_stream::end_block(std::uint32_t il) {
  if (il >= index_.size() || index_[il] < 0 || next_ % std::int64_t(blocks_.size()) != index_[il]) return;
  released_.store(++next_, std::memory_order_release);
  released_.notify_one();
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
  return s;
}

}  // namespace strata::tiers
