// The link probe (strata/runtime/link_probe.hpp): host DRAM read by T threads, O_DIRECT reads
// through io_uring at QD1 and QD32, the GPU copies (runtime/vulkan/transfer_probe.cpp), and the
// per-machine cache file.
#include "strata/runtime/link_probe.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/runtime/cache_dir.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

#ifdef STRATA_HAS_VULKAN
#include "devices.hpp"
#endif

namespace strata::rt {
namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Sweeps of a buffer by the CPU backend's own worker pool of `threads` threads: kept spinning
// between sweeps, so the time is the sweep's, not thread start-up or wake-up; each slice summed
// with four independent accumulators (one add chain would time the adder), and first written by
// the thread pool, so its pages sit where the workers run.
class dram_sweeper {
 public:
  dram_sweeper(std::uint64_t bytes, unsigned threads)
      : n_(bytes / sizeof(std::uint64_t) / 4 * 4), slices_(std::size_t(threads) * 8), per_(n_ / slices_ / 4 * 4),
        buf_(new std::uint64_t[n_]), sums_(slices_), pool_(threads), hot_(&pool_) {
    pool_.parallel_for(slices_, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t s = b; s < e; ++s)
        for (std::size_t i = s * per_, end = slice_end(s); i < end; ++i) buf_[i] = i;
    });
  }
  std::uint64_t bytes() const { return n_ * sizeof(std::uint64_t); }

  // Seconds of one sweep.
  double sweep() {
    const auto t0 = clock_type::now();
    pool_.parallel_for(slices_, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t s = b; s < e; ++s) {
        std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (std::size_t i = s * per_, end = slice_end(s); i < end; i += 4)
          a0 += buf_[i], a1 += buf_[i + 1], a2 += buf_[i + 2], a3 += buf_[i + 3];
        sums_[s] = a0 + a1 + a2 + a3;
      }
    });
    const double t = seconds_since(t0);
    std::uint64_t check = 0;
    for (const auto x : sums_) check += x;
    if (check != std::uint64_t(n_) * (n_ - 1) / 2) throw error("link probe: DRAM sweep summed wrong");  // keeps the loop
    return t;
  }

  // B/s of the best of 5 sweeps.
  double rate() {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) best = std::min(best, sweep());
    return double(bytes()) / best;
  }

  // B/s of the sweeps that ended before `stop` was raised (sweeping until then, so whatever
  // raised it ran beside the CPU's reads the whole time); 0 when none did.
  double rate_until(const std::atomic<bool>& stop) {
    double swept_s = 0;
    std::uint64_t swept = 0;
    while (!stop.load(std::memory_order_acquire)) {
      const double t = sweep();
      if (stop.load(std::memory_order_acquire)) break;  // it ended after the other side's
      swept_s += t, swept += bytes();
    }
    return swept_s > 0 ? double(swept) / swept_s : 0;
  }

 private:
  std::size_t slice_end(std::size_t s) const { return s + 1 == slices_ ? n_ : (s + 1) * per_; }
  std::size_t n_, slices_, per_;
  std::unique_ptr<std::uint64_t[]> buf_;
  std::vector<std::uint64_t> sums_;
  kernels::cpu::thread_pool pool_;
  kernels::cpu::thread_pool::hot_scope hot_;
};

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// O_DIRECT reads of 1 MiB at random aligned offsets of `file`, `depth` in flight, until `bytes`
// or `seconds` (B/s). Throws naming the file and the reason when O_DIRECT reads cannot be done.
double direct_read(const std::filesystem::path& file, unsigned depth, std::uint64_t bytes, double seconds) {
  constexpr std::size_t chunk = 1 << 20;
  fd_guard f{::open(file.c_str(), O_RDONLY | O_DIRECT)};
  if (f.fd < 0) throw error("cannot open '" + file.string() + "' with O_DIRECT: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw error("cannot stat '" + file.string() + "': " + std::strerror(errno));
  const std::uint64_t blocks = std::uint64_t(st.st_size) / chunk;
  if (blocks == 0) throw error("'" + file.string() + "' is smaller than one 1 MiB read");
  io_uring ring{};
  if (const int rc = io_uring_queue_init(depth, &ring, 0); rc < 0)
    throw error(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
  const std::unique_ptr<io_uring, void (*)(io_uring*)> ring_guard(&ring, io_uring_queue_exit);
  std::vector<void*> buffers(depth, nullptr);
  const auto free_all = [&] {
    for (void* b : buffers) std::free(b);
  };
  for (void*& b : buffers)
    if (posix_memalign(&b, 4096, chunk) != 0) {
      free_all();
      throw error("link probe: out of memory for O_DIRECT buffers");
    }
  std::mt19937_64 rng(42);
  std::uint64_t done = 0, issued = 0;
  unsigned in_flight = 0;
  const auto t0 = clock_type::now();
  const auto submit = [&](std::uintptr_t slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, f.fd, buffers[slot], chunk, (rng() % blocks) * chunk);
    io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(slot));
    ++in_flight;
    issued += chunk;
  };
  std::string failure;
  for (unsigned s = 0; s < depth; ++s) submit(s);
  io_uring_submit(&ring);
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (const int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) {
      failure = std::string("io_uring_wait_cqe: ") + std::strerror(-rc);
      break;
    }
    const int res = cqe->res;
    const auto slot = reinterpret_cast<std::uintptr_t>(io_uring_cqe_get_data(cqe));
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    if (res < 0 && failure.empty()) failure = std::strerror(-res);
    if (res > 0) done += std::uint64_t(res);
    if (failure.empty() && issued < bytes && seconds_since(t0) < seconds) {
      submit(slot);
      io_uring_submit(&ring);
    }
  }
  const double elapsed = seconds_since(t0);
  free_all();
  if (!failure.empty()) throw error("O_DIRECT read of '" + file.string() + "' failed: " + failure);
  return double(done) / elapsed;
}

std::string first_line_value(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(key)) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return {};
}

std::string fmt_rate(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

tiers::link_speeds probe_links(const probe_options& o) {
  tiers::link_speeds l = tiers::assumed_desktop_links();
  std::string measured, assumed = " gpu_flops cpu_flops handoff block";
  const unsigned threads = o.threads ? o.threads : kernels::cpu::thread_pool::physical_cores();
  dram_sweeper dram(o.dram_bytes, threads);
  l.cpu_read = dram.rate();
  measured += " cpu_read(" + std::to_string(threads) + " threads)";
  std::string notes;
  if (!o.disk_file.empty()) {
    try {
      l.nvme_qd1 = direct_read(o.disk_file, 1, o.disk_bytes, o.seconds_per_test);
      l.nvme_qd32 = direct_read(o.disk_file, 32, o.disk_bytes, o.seconds_per_test);
      measured += " nvme_qd1 nvme_qd32";
    } catch (const error& e) {
      assumed += " nvme_qd1 nvme_qd32";
      notes += "; disk not measured: " + std::string(e.what());
    }
  } else {
    assumed += " nvme_qd1 nvme_qd32";
  }
  bool gpu_done = false, side_by_side = false;
#ifdef STRATA_HAS_VULKAN
  if (o.gpu) {
    try {
      const gpu::transfer_speeds t =
          gpu::probe_transfers(o.device, o.gpu_bytes, [&](const std::atomic<bool>& done) { return dram.rate_until(done); });
      l.host_to_gpu = t.host_to_device;
      l.gpu_read = t.device_read;
      measured += " host_to_gpu gpu_read('" + t.device + "': copies, a read kernel)";
      // The two side by side: each rate's share kept, at most 1 (a share above is noise).
      if (t.beside_result > 0 && t.host_to_device_beside > 0) {
        l.cpu_read_beside_copies = std::min(1.0, t.beside_result / l.cpu_read);
        l.copies_beside_cpu_read = std::min(1.0, t.host_to_device_beside / l.host_to_gpu);
        measured += " cpu_read/host_to_gpu side by side";
        side_by_side = true;
      }
      gpu_done = true;
    } catch (const std::exception& e) {
      notes += "; GPU not measured: " + std::string(e.what());
    }
  }
#endif
  if (!gpu_done) assumed += " host_to_gpu gpu_read";
  if (!side_by_side) assumed += " side_by_side";
  l.source = "probe: measured" + measured + "; assumed" + assumed + notes;
  return l;
}

std::filesystem::path link_cache_path(const probe_options& o) {
  const std::filesystem::path dir = default_cache_dir();
  if (dir.empty()) return {};
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "|" + std::string.
  std::string key = host;
  key += '|';
  key += first_line_value("/proc/cpuinfo", "model name");
  key += '|';
  key += std::to_string(o.threads ? o.threads : kernels::cpu::thread_pool::physical_cores());
#ifdef STRATA_HAS_VULKAN
  if (o.gpu) {
    try {
      key += '|';
      key += gpu::query_device_memory(o.device).name;
    } catch (const std::exception&) {
      key += "|no-gpu";
    }
  }
#endif
  struct stat st {};
  if (!o.disk_file.empty() && ::stat(o.disk_file.c_str(), &st) == 0)
    key += "|dev " + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  char name[40];
  std::snprintf(name, sizeof name, "links-%016llx.txt", static_cast<unsigned long long>(h));
  return dir / name;
}

void save_cached_links(const std::filesystem::path& file, const tiers::link_speeds& l) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file);
  out << "strata-link-probe 3\n"
      << "gpu_read " << fmt_rate(l.gpu_read) << "\nhost_to_gpu " << fmt_rate(l.host_to_gpu) << "\ncpu_read "
      << fmt_rate(l.cpu_read) << "\nnvme_qd1 " << fmt_rate(l.nvme_qd1) << "\nnvme_qd32 " << fmt_rate(l.nvme_qd32)
      << "\ngpu_flops " << fmt_rate(l.gpu_flops) << "\ncpu_flops " << fmt_rate(l.cpu_flops) << "\nhandoff_s "
      << fmt_rate(l.handoff_s) << "\nblock_s " << fmt_rate(l.block_s) << "\ncpu_read_beside_copies "
      << fmt_rate(l.cpu_read_beside_copies) << "\ncopies_beside_cpu_read " << fmt_rate(l.copies_beside_cpu_read) << "\nsource " << l.source << "\n";
  if (!out) throw error("cannot write the link probe cache '" + file.string() + "'");
}

std::optional<tiers::link_speeds> load_cached_links(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string line;
  // Version 1 timed each GPU copy with its submission (GPU read a tenth of the truth on an H100);
  // version 2 had no side-by-side shares: such a file is as good as none, and the next --plan
  // --probe replaces it.
  if (std::getline(in, line) && (line == "strata-link-probe 1" || line == "strata-link-probe 2")) return std::nullopt;
  if (line != "strata-link-probe 3")
    throw error("link probe cache '" + file.string() + "': line 1 is not 'strata-link-probe 3' (delete the file)");
  tiers::link_speeds l;
  int line_no = 1, numbers = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (key == "source") {
      l.source = "probe cache " + file.string() + " (" + value + ")";
      continue;
    }
    double* field = key == "gpu_read" ? &l.gpu_read : key == "host_to_gpu" ? &l.host_to_gpu
                  : key == "cpu_read" ? &l.cpu_read : key == "nvme_qd1" ? &l.nvme_qd1
                  : key == "nvme_qd32" ? &l.nvme_qd32 : key == "gpu_flops" ? &l.gpu_flops
                  : key == "cpu_flops" ? &l.cpu_flops : key == "handoff_s" ? &l.handoff_s
                  : key == "block_s" ? &l.block_s : key == "cpu_read_beside_copies" ? &l.cpu_read_beside_copies
                  : key == "copies_beside_cpu_read" ? &l.copies_beside_cpu_read : nullptr;
    char* end = nullptr;
    const double v = field ? std::strtod(value.c_str(), &end) : 0;
    const bool share = field == &l.cpu_read_beside_copies || field == &l.copies_beside_cpu_read;
    if (!field || value.empty() || *end != '\0' || !(v > 0) || (share && v > 1))
      throw error("link probe cache '" + file.string() + "' line " + std::to_string(line_no) + ": '" + line + "' is not '" +
                  (share ? "<share> <number in (0, 1]>" : "<link> <positive number>") + "' (delete the file to probe again)");
    *field = v;
    ++numbers;
  }
  if (numbers != 11 || l.source.empty())
    throw error("link probe cache '" + file.string() + "' is incomplete (delete the file to probe again)");
  return l;
}

}  // namespace strata::rt
