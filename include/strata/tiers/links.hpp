// Speeds of the links a placement uses, in bytes or flops per second. They come from the
// start-up probe (runtime/tiers/probe, cached per machine) or, without one, from the assumed
// desktop defaults below, which every report labels as assumed.
#pragma once
#include <string>

namespace strata::tiers {

struct link_speeds {
  double gpu_read = 0;      // device-local memory read by a kernel (B/s)
  double host_to_gpu = 0;   // pinned host RAM -> device copy (B/s)
  double cpu_read = 0;      // host DRAM read by the CPU backend's threads (B/s)
  double nvme_qd1 = 0;      // O_DIRECT 1 MiB reads, one in flight (B/s)
  double nvme_qd32 = 0;     // O_DIRECT 1 MiB reads, 32 in flight (B/s)
  double gpu_flops = 0;     // matrix multiply throughput the GPU reaches on quantized weights
  double cpu_flops = 0;     // same for the CPU backend at its thread count
  double handoff_s = 0;     // one GPU <-> CPU switch inside a step (submit, fence, hidden state)
  // A step's fixed time per block that no byte count covers: on the GPU the launch and drain of
  // its chain of dependent dispatches (about six levels a block), on the CPU the barriers between
  // its ops. Counted for every block wherever it runs, so it moves the predictions, not the
  // choice between layouts. Decode pays it per token; a prompt step shares it among its tokens.
  double block_s = 0;
  // The share of each rate kept while the CPU's threads read DRAM and the link's copies read it
  // too (the link beside the CPU in decode, tiers/link_schedule.hpp): both reach the same memory
  // channels, which a desktop's CPU alone nearly fills. 1: no contention.
  double cpu_read_beside_copies = 1;
  double copies_beside_cpu_read = 1;
  std::string source;       // where the numbers come from ("probe <file>", "assumed ...")

  bool assumed() const noexcept { return source.starts_with("assumed"); }
};

// A desktop of the target class: a PCIe 4.0 x16 card with ~500 GB/s memory, dual-channel
// DDR5 (~60 GB/s reachable), a PCIe 4.0 NVMe drive. Round numbers, not measurements.
inline link_speeds assumed_desktop_links() {
  return {.gpu_read = 500e9,
          .host_to_gpu = 24e9,
          .cpu_read = 60e9,
          .nvme_qd1 = 1.5e9,
          .nvme_qd32 = 6e9,
          .gpu_flops = 60e12,
          .cpu_flops = 1e12,
          .handoff_s = 50e-6,
          // The H100/H200's: ~57 us a qwen3-30b-a3b block at decode, ~11 us of it reading weights.
          .block_s = 45e-6,
          // Dual-channel DDR5 reaches ~65-70 GB/s in all: the CPU's 60 and the link's 24 do not
          // both fit, so each keeps 0.8 of its rate.
          .cpu_read_beside_copies = 0.8,
          .copies_beside_cpu_read = 0.8,
          .source = "assumed desktop defaults (no probe)"};
}

}  // namespace strata::tiers
