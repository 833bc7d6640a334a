// The CPU backend in the engine: how a stage makes and describes it (with the disk tier's ring
// when the slice streams blocks from the model file), and the CPU decoder of every architecture
// (arch/all.hpp), instantiated here once.

#include <cstdlib>
#include <string_view>

#include "decoder_stage.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::rt {

namespace {
const tiers::block_stream* disk_stream(const kernels::cpu::backend& be) {
  return dynamic_cast<const tiers::block_stream*>(be.stream());
}

// "blocks 20-23, 26" from ascending block numbers.
std::string block_list(const std::vector<std::uint32_t>& b) {
  std::string s = b.size() == 1 ? "block " : "blocks ";
  for (std::size_t i = 0; i < b.size();) {
    std::size_t j = i;
    while (j + 1 < b.size() && b[j + 1] == b[j] + 1) ++j;
    if (i) s += ", ";
    s += std::to_string(b[i]);
    if (j > i) s += "-" + std::to_string(b[j]);
    i = j + 1;
  }
  return s;
}
}  // namespace

template <>
struct engine_backend<kernels::cpu::backend> {
  static std::unique_ptr<kernels::cpu::backend> make(const engine_options& opt, const layer_slice& s) {
    auto be = std::make_unique<kernels::cpu::backend>(opt.threads ? opt.threads : kernels::cpu::thread_pool::physical_cores(),
                                                      select_kernel_table(engine_isa()));
    // Lab knobs (bench/RESULTS.md, "CPU Q8_0 on AMX, thread scaling"): 0 restores the split
    // and pool counting from before them (STRATA_CPU_DECODE_CHUNKS=8 and STRATA_CPU_PREFILL_CHUNKS=4 are the defaults;
    // the pool counts finished items one by one unless STRATA_CPU_POOL_BATCHED_DONE=1).
    kernels::cpu::work_split split;
    if (const char* e = std::getenv("STRATA_CPU_PREFILL_CHUNKS")) split.prefill_chunks_per_thread = unsigned(std::strtoul(e, nullptr, 10));
    if (const char* e = std::getenv("STRATA_CPU_TOKEN_SPLIT")) split.prefill_min_items_per_thread = unsigned(std::strtoul(e, nullptr, 10));
    if (const char* e = std::getenv("STRATA_CPU_SWIGLU_PASS")) split.swiglu_pass_min_tokens = unsigned(std::strtoul(e, nullptr, 10));
    if (const char* e = std::getenv("STRATA_CPU_ATTN_SPLIT_HEADS")) split.decode_attention_split_heads = std::string_view(e) != "0";
    if (const char* e = std::getenv("STRATA_CPU_DECODE_CHUNKS")) split.decode_chunks_per_thread = unsigned(std::strtoul(e, nullptr, 10));
    if (const char* e = std::getenv("STRATA_CPU_DECODE_MIN_ITEM_KIB")) split.decode_min_item_bytes = std::size_t(std::strtoul(e, nullptr, 10)) << 10;
    be->set_work_split(split);
    if (const char* e = std::getenv("STRATA_CPU_POOL_BATCHED_DONE")) be->pool().set_batched_done(std::string_view(e) != "0");
    if (!s.disk_tensors.empty()) {
      // Lab knobs (bench/RESULTS.md, disk tier): reads in flight, their size, registered slots.
      unsigned depth = 32, chunk_kib = 1024;
      if (const char* e = std::getenv("STRATA_DISK_DEPTH")) depth = unsigned(std::strtoul(e, nullptr, 10));
      if (const char* e = std::getenv("STRATA_DISK_CHUNK_KIB")) chunk_kib = unsigned(std::strtoul(e, nullptr, 10));
      const char* fixed = std::getenv("STRATA_DISK_FIXED");
      be->set_weight_stream(std::make_unique<tiers::block_stream>(s.disk_file, s.disk_tensors, s.disk_slots, depth,
                                                                  std::size_t(chunk_kib) << 10,
                                                                  !(fixed && std::string_view(fixed) == "0")));
    }
    return be;
  }
  static std::string describe(const kernels::cpu::backend& be) {
    return "cpu (" + std::to_string(be.threads()) + " threads, " + std::string(kernels::cpu::name_of(engine_isa())) + ")";
  }
  static std::string startup_report(const kernels::cpu::backend& be) {
    const tiers::block_stream* d = disk_stream(be);
    if (!d) return {};
    const tiers::block_stream_stats st = d->stats();
    return "disk tier: " + block_list(d->blocks()) + " (" + std::to_string(st.blocks) + ") stream from '" +
           d->file().string() + "' every step, " + format_byte_size(st.bytes_per_step) +
           " per step (O_DIRECT, io_uring, 32 x 1 MiB in flight) through " + std::to_string(st.slots) + " slots of " +
           format_byte_size(st.slot_bytes) + (st.fixed_buffers ? " registered with the ring (READ_FIXED)" : " (not registered: plain reads)") +
           ", one block ahead";
  }
  static model::disk_counters disk_tier(const kernels::cpu::backend& be) {
    const tiers::block_stream* d = disk_stream(be);
    if (!d) return {};
    const tiers::block_stream_stats s = d->stats();
    model::disk_counters c;
    c.blocks = s.blocks, c.slots = s.slots, c.slot_bytes = s.slot_bytes, c.bytes_per_step = s.bytes_per_step;
    c.bytes_read = s.bytes_read, c.block_reads = s.block_reads, c.stalls = s.stalls, c.steps = s.steps, c.tokens = s.tokens;
    c.read_seconds = s.read_seconds, c.stall_seconds = s.stall_seconds;
    return c;
  }
};

std::unique_ptr<stage> make_cpu_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& layers) {
  return make_decoder_stage<kernels::cpu::backend>(r, opt, layers);
}

}  // namespace strata::rt
