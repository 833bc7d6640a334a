// Start-up probe of the links the placement planner weighs (issue 14): host DRAM read by the CPU
// backend's threads, pinned host -> GPU copy and GPU device-local traffic (Vulkan), and O_DIRECT
// reads of the drive holding the model at queue depth 1 and 32 (io_uring). Results are cached on
// disk per machine (next to the SPIR-V cache), keyed by host, CPU, threads, GPU and drive.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "strata/tiers/links.hpp"

namespace strata::rt {

struct probe_options {
  std::filesystem::path disk_file;         // a file on the weights' drive (the model); empty: no disk probe
  unsigned threads = 0;                    // CPU backend threads (0: physical cores)
  bool gpu = true;                         // probe the Vulkan device (lavapipe included when asked for)
  int device = -1;                         // Vulkan device index (-1: the backend's pick)
  std::uint64_t dram_bytes = 512ull << 20; // buffer the CPU read test sweeps (beyond a server's L3)
  std::uint64_t gpu_bytes = 64ull << 20;   // bytes per GPU copy
  std::uint64_t disk_bytes = 1ull << 30;   // at most this much read per queue depth
  double seconds_per_test = 1.0;           // time bound of each disk test
};

// Measures what it can; what it cannot (no GPU, no O_DIRECT on that file system) keeps the
// assumed default, and `source` lists which numbers were measured and which are assumed.
tiers::link_speeds probe_links(const probe_options& o);

// Cache file for these options: <cache dir>/links-<hash of host, CPU, threads, GPU, drive>.txt.
// Empty when no cache directory is known.
std::filesystem::path link_cache_path(const probe_options& o);
// nullopt when the file does not exist or is an older probe's; a malformed file is an error naming it
// and the line.
std::optional<tiers::link_speeds> load_cached_links(const std::filesystem::path& file);
void save_cached_links(const std::filesystem::path& file, const tiers::link_speeds& l);

}  // namespace strata::rt
