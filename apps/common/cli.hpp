// The command line of every Strata app: one CLI11 setup with llama.cpp-style help ("usage:"
// line with the program name, options grouped by purpose, examples at the end; help2man turns
// it into the man page), --version, the logging flags, llama.cpp's single-dash multi-letter
// aliases (-ngl, -np, -cnv, -ctk, ...), and the option groups several apps share, declared once
// so names, defaults and help text cannot drift between apps.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "log.hpp"
#include "tier_options.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::app {

struct app_info {
  std::string name;         // program name, e.g. "strata-run"
  std::string usage;        // after the name in the usage line, e.g. "-m FILE [options]"
  std::string description;  // one paragraph
  std::vector<std::pair<std::string, std::string>> examples;  // (what it does, command line)
};

// Group names, in the order help prints them (CLI11 prints groups in first-use order).
namespace group {
inline constexpr const char* general = "General";
inline constexpr const char* model = "Model";
inline constexpr const char* backend = "Backend";
inline constexpr const char* context = "Context and batching";
inline constexpr const char* kv = "KV cache";
inline constexpr const char* tiers = "Memory tiers (models larger than the GPU)";
inline constexpr const char* sampling = "Sampling";
inline constexpr const char* server = "Server";
inline constexpr const char* output = "Output";
inline constexpr const char* logging = "Logging";
}  // namespace group

// Log flags every app has: --log-level (and, for strata-serve, --log-format).
struct log_options {
  std::string level;          // empty: STRATA_LOG, else info
  std::string format = "text";
};

class cli {
 public:
  explicit cli(app_info info);
  CLI::App& app() noexcept { return *app_; }
  const app_info& info() const noexcept { return info_; }

  // Adds --log-level LEVEL (and --log-format text|json when `with_format`) to the Logging group.
  void add_log_options(log_options& o, bool with_format = false);

  // Parses argv (after rewriting the single-dash aliases). Returns an exit code when the
  // program should stop (help, version, a usage error, already reported), else -1.
  int parse(int argc, char** argv);

 private:
  app_info info_;
  std::unique_ptr<CLI::App> app_;
};

// Validators whose descriptions stay out of the help's argument names ("N", not "N:INT in [..]").
CLI::Validator one_of(std::vector<std::string> allowed);
CLI::Validator in_range(double lo, double hi);

// A logger built from the parsed log options (format "json" or "text").
std::unique_ptr<logger> make_logger(const log_options& o);

// --- Option groups shared by several apps -----------------------------------------------------

// -m, --model FILE: required unless the app has a default (then `help` says which).
void add_model_option(CLI::App& app, std::string& path, const std::string& help = {});
// -t, --threads N (0: physical cores).
void add_threads_option(CLI::App& app, unsigned& threads);

struct backend_options {
  std::string backend = "auto";  // auto | cpu | vulkan
  int device = -1;               // Vulkan device index
  int n_gpu_layers = -1;         // -ngl: layers on the GPU, the rest on the CPU (-1: all)
};
// --backend, --device, -ngl/--n-gpu-layers/--gpu-layers, --list-devices (prints and exits).
void add_backend_options(CLI::App& app, backend_options& o);

struct kv_options {
  std::string type = "f16";        // --kv-type: K and V
  std::string type_k, type_v;      // -ctk/--kv-type-k, -ctv/--kv-type-v (override one side)
  std::uint32_t window = kv::default_full_precision_window;  // --kv-window
};
// --kv-type, --kv-type-k (-ctk, --cache-type-k), --kv-type-v (-ctv, --cache-type-v), --kv-window.
void add_kv_options(CLI::App& app, kv_options& o);

// -c/--ctx-size and -b/--batch-size with each app's meaning (help texts differ: serve shares
// its context between sequences). A batch of 0 (not given) is the engine's choice, shown as auto.
CLI::Option* add_ctx_option(CLI::App& app, std::uint32_t& n_ctx, const std::string& help);
void add_batch_option(CLI::App& app, std::uint32_t& n_batch, const std::string& help);

// --gpu-budget, --ram-budget, -ot/--override-tensor, --cpu-moe, --n-cpu-moe, --fit.
void add_tier_options(CLI::App& app, tier_options& o);

// Fills the engine options these groups describe (parsing backend and KV type names; a bad
// name throws strata::error naming it).
void apply(const backend_options& b, rt::engine_options& eo);
void apply(const kv_options& k, rt::engine_options& eo);

}  // namespace strata::app
