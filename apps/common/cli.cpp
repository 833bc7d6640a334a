#include "cli.hpp"
#include "crash_report.hpp"

#include <algorithm>
#include <charconv>
#include <iostream>
#include <sstream>
#include <string_view>

#include "strata/core/byte_size.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/tiers/overrides.hpp"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

namespace strata::app {
namespace {

// llama.cpp's multi-letter single-dash flags (CLI11 only has one-letter short names): each is
// rewritten to the long option before parsing, when the app has that option.
constexpr std::pair<std::string_view, std::string_view> single_dash_aliases[] = {
    {"-ngl", "--n-gpu-layers"}, {"-np", "--parallel"},      {"-cnv", "--conversation"},
    {"-sys", "--system-prompt"}, {"-ctk", "--kv-type-k"},   {"-ctv", "--kv-type-v"},
    {"-npp", "--pp"},            {"-pp", "--pp"},           {"-ntg", "--tg"},
    {"-tg", "--tg"},             {"-npl", "--npl"},         {"--ngl", "--n-gpu-layers"},
    {"-ot", "--override-tensor"}, {"-jf", "--json-schema-file"},
};

constexpr std::size_t name_column = 34;

// Words of `text` filled into lines of at most `width` columns, each indented by `indent`
// (the first line's indent is the caller's).
std::string wrap(const std::string& text, std::size_t indent, std::size_t first_col, std::size_t width = 100) {
  std::string out;
  std::size_t col = first_col;
  bool first = true;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!first && col + 1 + w.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++col;
    }
    out += w;
    col += w.size();
    first = false;
  }
  return out;
}

// Help in llama.cpp's shape: usage line, description, "----- group -----" sections with one
// option per line (aliases first, then the argument name), defaults in the text, examples last.
class formatter final : public CLI::Formatter {
 public:
  explicit formatter(app_info info) : info_(std::move(info)) {}

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::ostringstream out;
    out << "usage: " << info_.name << " " << info_.usage << "\n\n" << wrap(info_.description, 0, 0) << "\n";
    for (const std::string& g : app->get_groups()) {
      const auto opts = app->get_options([&](const CLI::Option* o) { return o->get_group() == g; });
      if (g.empty() || opts.empty()) continue;
      out << "\n----- " << g << " -----\n\n";
      for (const auto* o : opts) out << option_line(o);
    }
    if (!info_.examples.empty()) {
      out << "\nexamples:\n";
      for (const auto& [what, cmd] : info_.examples) out << "\n  " << what << ":\n    " << cmd << "\n";
    }
    return out.str();
  }

 private:
  std::string option_line(const CLI::Option* o) const {
    std::string names;
    const auto longs = o->get_lnames();
    for (const auto& [alias, target] : single_dash_aliases)
      if (alias.size() > 1 && alias[1] != '-' &&
          std::find(longs.begin(), longs.end(), std::string(target.substr(2))) != longs.end())
        names += std::string(alias) + ", ";
    for (const auto& s : o->get_snames()) names += "-" + s + ", ";
    for (const auto& l : longs) names += "--" + l + ", ";
    if (!o->get_positional() && names.size() >= 2) names.resize(names.size() - 2);
    if (o->get_positional()) names = o->get_name();
    if (o->get_type_size() != 0 && !o->get_positional()) names += " " + o->get_type_name();
    std::string desc = o->get_description();
    if (!o->get_default_str().empty() && o->get_type_size() != 0) desc += " (default: " + o->get_default_str() + ")";
    if (o->get_required() && !o->get_positional()) desc += " (required)";
    std::string line = "  " + names;
    if (line.size() + 2 > name_column) line += "\n" + std::string(name_column, ' ');
    else line += std::string(name_column - line.size(), ' ');
    line += wrap(desc, name_column, name_column);
    return line + "\n";
  }

  app_info info_;  // a copy: the cli object may move
};

// A flag's whole-number value; anything else is refused naming the flag and what it counts.
std::uint32_t parse_count(const char* flag, const std::string& text, const char* what, const char* example) {
  std::uint32_t n = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || p != end)
    throw error(std::string(flag) + ": '" + text + "' is not a " + what + " (a whole number, e.g. " + example + ")");
  return n;
}

}  // namespace

cli::cli(app_info info) : info_(std::move(info)), app_(std::make_unique<CLI::App>(info_.description, info_.name)) {
  install_crash_report();
  app_->formatter(std::make_shared<formatter>(info_));
  app_->set_help_flag("-h,--help", "print this help and exit")->group(group::general);
  app_->set_version_flag("--version", info_.name + " " STRATA_VERSION, "print the version and exit");
  if (auto* v = app_->get_option_no_throw("--version")) v->group(group::general);
}

void cli::add_log_options(log_options& o, bool with_format) {
  app_->add_option("--log-level", o.level, "error, warn, info or debug (env: STRATA_LOG; default: info)")
      ->type_name("LEVEL")
      ->check(one_of({"error", "warn", "warning", "info", "debug", "0", "1", "2", "3"}))
      ->group(group::logging);
  if (with_format)
    app_->add_option("--log-format", o.format, "text (one line: time, level, [component] message) or json (one object per line)")
        ->type_name("FORMAT")
        ->capture_default_str()
        ->check(one_of({"text", "json"}))
        ->group(group::logging);
}

int cli::parse(int argc, char** argv) {
  std::vector<std::string> args;  // CLI11 takes them in reverse order
  for (int i = argc - 1; i >= 1; --i) {
    std::string a = argv[i];
    for (const auto& [alias, target] : single_dash_aliases)
      if (a == alias && app_->get_option_no_throw(std::string(target))) a = std::string(target);
    args.push_back(std::move(a));
  }
  try {
    app_->parse(args);
  } catch (const CLI::ParseError& e) {
    return app_->exit(e);
  }
  return -1;
}

CLI::Validator one_of(std::vector<std::string> allowed) {
  return CLI::Validator(
      [allowed](std::string& v) -> std::string {
        if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return {};
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return "'" + v + "' is not one of " + list;
      },
      "", "one_of");
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        double x = 0;
        try {
          std::size_t used = 0;
          x = std::stod(v, &used);
          if (used != v.size()) throw std::invalid_argument(v);
        } catch (const std::exception&) {
          return "'" + v + "' is not a number";
        }
        if (x < lo || x > hi) {
          std::ostringstream m;
          m << v << " is out of range [" << lo << ", " << hi << "]";
          return m.str();
        }
        return {};
      },
      "", "in_range");
}

std::unique_ptr<logger> make_logger(const log_options& o) {
  return std::make_unique<logger>(resolve_log_level(o.level), o.format == "json" ? log_format::json : log_format::text);
}

void add_model_option(CLI::App& app, std::string& path, const std::string& help) {
  auto* o = app.add_option("-m,--model", path, help.empty() ? "GGUF model file" : help)->type_name("FILE")
                ->group(group::model);
  if (help.empty()) o->required();
}

void add_threads_option(CLI::App& app, unsigned& threads) {
  app.add_option("-t,--threads", threads, "CPU threads (0: one per physical core)")
      ->type_name("N")
      ->capture_default_str()
      ->group(group::backend);
}

void add_backend_options(CLI::App& app, backend_options& o) {
  app.add_option("--backend", o.backend, "compute backend: auto (Vulkan on a GPU, else CPU), cpu, vulkan")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(one_of({"auto", "cpu", "vulkan"}))
      ->group(group::backend);
  app.add_option("--device", o.device, "Vulkan device index (see --list-devices; -1: the best GPU)")
      ->type_name("N")
      ->capture_default_str()
      ->group(group::backend);
  app.add_option("--n-gpu-layers,--gpu-layers", o.n_gpu_layers,
                 "layers on the GPU, the rest on the CPU (-1: all)")
      ->type_name("N")
      ->capture_default_str()
      ->group(group::backend);
  app.add_flag_callback(
         "--list-devices",
         [] {
           if (!rt::vulkan_compiled_in()) std::cout << "this build has no Vulkan backend\n";
           const auto devs = rt::vulkan_devices();
           if (rt::vulkan_compiled_in() && devs.empty()) std::cout << "no Vulkan devices (no loader or driver)\n";
           for (std::size_t i = 0; i < devs.size(); ++i) std::cout << i << ": " << devs[i] << "\n";
           throw CLI::Success();
         },
         "list the Vulkan devices and exit")
      ->group(group::backend);
}

void add_kv_options(CLI::App& app, kv_options& o) {
  app.add_option("--kv-type", o.type, "KV cache type for K and V: f16, f32, q8_0, tq4, tq3, tq2")
      ->type_name("TYPE")
      ->capture_default_str()
      ->group(group::kv);
  app.add_option("--kv-type-k,--cache-type-k", o.type_k, "KV cache type for K only (overrides --kv-type)")
      ->type_name("TYPE")
      ->group(group::kv);
  app.add_option("--kv-type-v,--cache-type-v", o.type_v, "KV cache type for V only (overrides --kv-type)")
      ->type_name("TYPE")
      ->group(group::kv);
  app.add_option("--kv-window", o.window,
                 "recent tokens attention reads at full precision with compressed KV types (0: none)")
      ->type_name("N")
      ->capture_default_str()
      ->group(group::kv);
}

CLI::Option* add_ctx_option(CLI::App& app, std::uint32_t& n_ctx, const std::string& help) {
  return app.add_option("-c,--ctx-size", n_ctx, help)->type_name("N")->capture_default_str()->group(group::context);
}

void add_batch_option(CLI::App& app, std::uint32_t& n_batch, const std::string& help) {
  auto* o = app.add_option("-b,--batch-size", n_batch, help)->type_name("N")->check(in_range(1, 1 << 16))->group(group::context);
  // 0 until given: the engine chooses (rt::prompt_step_tokens).
  if (n_batch) o->capture_default_str();
  else o->default_str("auto: 2048 where the model runs whole on a GPU with room, else 512");
}

void add_tier_options(CLI::App& app, tier_options& o) {
  app.add_option("--gpu-budget", o.gpu_budget,
                 "GPU memory this process may use, e.g. 12G: weights, KV cache and scratch within it less up to "
                 "256 MiB kept for the driver's own memory (a hard cap: a layout beyond it is an error naming "
                 "what does not fit; with --fit the default is the free GPU memory minus a margin)")
      ->type_name("SIZE")->group(group::tiers);
  app.add_option("--ram-budget", o.ram_budget,
                 "RAM for the weights, KV cache and scratch of what runs on the CPU, e.g. 48G (default: unchecked; "
                 "with --fit MemAvailable minus a margin)")
      ->type_name("SIZE")->group(group::tiers);
  app.add_option("--override-tensor", o.override_tensor,
                 "REGEX=gpu|cpu|disk[,...]: tensors whose name matches go there (first match wins); without --fit only "
                 "routed experts (ffn_*_exps) may leave the GPU this way")
      ->type_name("RULES")->group(group::tiers);
  app.add_flag("--cpu-moe", o.cpu_moe,
               "compute the routed experts of every MoE layer on the CPU (attention, router and shared expert stay on the GPU)")
      ->group(group::tiers);
  app.add_option("--n-cpu-moe", o.n_cpu_moe, "compute the routed experts of the first N layers on the CPU")
      ->type_name("N")->group(group::tiers);
  app.add_option("--expert-cache", o.expert_cache,
                 "GPU-cache the routed experts of the GPU's MoE layers: they live in RAM and the GPU holds SLOTS experts "
                 "per layer (SLRU), uploading a routed expert on a miss (layers sent to the CPU stay there)")
      ->type_name("SLOTS")->group(group::tiers);
  app.add_option("--expert-misses", o.expert_misses,
                 "where a decode step computes the GPU-cached experts that miss their slots: cpu (the layer's experts "
                 "on the CPU from RAM, a hand-off after its router) or gpu (the expert kernels read them over the link); "
                 "default: what the link speeds predict faster (cpu only for one expert a token)")
      ->type_name("cpu|gpu")->group(group::tiers);
  app.add_option("--stream-layers", o.stream_layers,
                 "stream the dense FFN of the last N GPU layers: its weights live in pinned RAM and are copied into a "
                 "2-slot GPU ring one layer ahead of use in prompt steps (a batch reads each weight once), and computed "
                 "on the CPU in decode steps when the link speeds say the CPU is faster (attention and KV stay on the GPU)")
      ->type_name("N")->group(group::tiers);
  app.add_option("--stream-link", o.stream_link,
                 "in decode steps, which compute the streamed FFNs on the CPU, copy N of them (spread evenly, at most "
                 "half) into the GPU ring instead while the CPU computes the others, so the link and the host's memory "
                 "carry weights at once (default: the count the cost model predicts fastest; 0: all on the CPU)")
      ->type_name("N")->group(group::tiers);
  app.add_flag("--no-stream-experts", o.no_stream_experts,
               "keep the routed experts the CPU computes (--cpu-moe, --n-cpu-moe, -ot, --fit) on the CPU in prompt steps "
               "too; by default a prompt step longer than the link speeds' threshold copies them, every expert, into a "
               "2-slot GPU ring and the GPU computes them, when the GPU budget holds the ring")
      ->group(group::tiers);
  app.add_flag("--no-expert-cache", o.no_expert_cache,
               "with --fit: never GPU-cache routed experts; each MoE layer's experts are then GPU-resident or computed "
               "by the CPU (by default --fit may keep them in RAM with GPU slots for the most-routed ones, as "
               "--expert-cache does, when it predicts that faster)")
      ->group(group::tiers);
  app.add_option("--f16-weights", o.f16_weights,
                 "keep an f16 copy of each layer's weight matrices on the GPU for prompt steps, whose tensor-core GEMMs "
                 "then read it instead of expanding the quantized weights to f16 every step (faster prefill for ~2 bytes "
                 "a weight more GPU memory; decode reads the quantized weights either way); auto: when neither "
                 "--gpu-budget nor --fit is given and the free GPU memory holds the copies with a quarter of the "
                 "GPU's memory (at least 4 GiB) to spare, copying as many layers as fit (the default)")
      ->type_name("auto|on|off")->group(group::tiers);
  app.add_flag("--fit", o.fit,
               "let the placement planner choose the GPU layers, which layers' FFN to stream and which layers' experts "
               "the CPU computes or the GPU caches, within "
               "--gpu-budget and --ram-budget (-ngl is then not read; -ot, --cpu-moe, --n-cpu-moe still apply)")
      ->group(group::tiers);
}

void apply(const tier_options& t, rt::engine_options& eo) {
  eo.gpu_budget = t.gpu_budget.empty() ? 0 : parse_byte_size(t.gpu_budget, "--gpu-budget");
  eo.ram_budget = t.ram_budget.empty() ? 0 : parse_byte_size(t.ram_budget, "--ram-budget");
  if (!t.gpu_budget.empty() && eo.gpu_budget == 0) throw error("--gpu-budget: 0 leaves nothing for the GPU; use --backend cpu");
  if (!t.ram_budget.empty() && eo.ram_budget == 0) throw error("--ram-budget: 0 leaves nothing for the CPU side");
  std::vector<tiers::override_rule> rules;  // parsed here too, so a bad rule fails before the model loads
  for (const auto& r : t.override_tensor) tiers::parse_override_rules(r, rules);
  eo.override_tensor = t.override_tensor;
  eo.cpu_moe = t.cpu_moe;
  eo.n_cpu_moe = t.n_cpu_moe;
  eo.fit = t.fit;
  eo.stream_layers = t.stream_layers;
  // more than half the streamed blocks: model::load names the limit
  if (!t.stream_link.empty()) eo.stream_link = parse_count("--stream-link", t.stream_link, "block count", "8");
  eo.stream_experts = !t.no_stream_experts;
  eo.cache_experts = !t.no_expert_cache;
  // 0 and more slots than a layer's experts: model::load names the limit
  if (!t.expert_cache.empty()) eo.expert_cache = parse_count("--expert-cache", t.expert_cache, "slot count", "32");
  if (t.f16_weights == "on" || t.f16_weights == "off") eo.f16_weights = t.f16_weights == "on";
  else if (t.f16_weights == "auto") eo.f16_weights.reset();
  else if (!t.f16_weights.empty()) throw error("--f16-weights '" + t.f16_weights + "': expected auto, on or off");
  if (t.expert_misses == "cpu" || t.expert_misses == "gpu") eo.expert_cpu_misses = t.expert_misses == "cpu";
  else if (!t.expert_misses.empty()) throw error("--expert-misses '" + t.expert_misses + "': expected cpu or gpu");
}

void apply(const backend_options& b, rt::engine_options& eo) {
  eo.backend = rt::parse_backend_kind(b.backend);
  eo.device = b.device;
  eo.n_gpu_layers = b.n_gpu_layers;
}

void apply(const kv_options& k, rt::engine_options& eo) {
  const auto t = kv::parse_kv_cache_types(k.type, k.type_k, k.type_v);
  eo.type_k = t.k;
  eo.type_v = t.v;
  eo.kv_window = k.window;
}

}  // namespace strata::app
