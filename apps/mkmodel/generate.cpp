// Planning and writing of a generated model. Metadata mirrors what convert_hf_to_gguf.py +
// llama-quantize put in real files of each architecture (keys in docs/spec/architectures.md §1.3-1.5).
#include "generate.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "async_file.hpp"
#include "random_blocks.hpp"
#include "router_skew.hpp"
#include "vocab.hpp"

namespace strata::mkmodel {

namespace {

constexpr float weight_sigma = 0.02f;  // projections and embeddings: like N(0, 0.02) init
constexpr float router_sigma = 0.1f;   // MoE routers: as the fixture generator, decisive routing

std::string names_of_presets() {
  std::string s;
  for (const auto& p : presets()) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}
std::string names_of_types() {
  std::string s;
  for (const auto& f : ftypes()) {
    if (!s.empty()) s += ", ";
    s += f.name;
  }
  return s;
}

void add_metadata(gguf::writer& w, const preset& p, const ftype_info& ft) {
  const std::string a(arch_name(p.architecture));
  const auto k = [&](std::string_view suffix) { return a + "." + std::string(suffix); };
  w.set("general.architecture", std::string_view(a));
  w.set("general.type", "model");
  w.set("general.name", p.general_name);
  w.set("general.size_label", p.size_label);
  w.set(k("block_count"), p.n_layer);
  w.set(k("context_length"), p.n_ctx);
  w.set(k("embedding_length"), p.n_embd);
  w.set(k("feed_forward_length"), p.n_ff);
  w.set(k("attention.head_count"), p.n_head);
  w.set(k("attention.head_count_kv"), p.n_head_kv);
  w.set(k("rope.freq_base"), p.rope_base);
  w.set(k("attention.layer_norm_rms_epsilon"), p.rms_eps);
  if (p.n_expert) {
    w.set(k("expert_count"), p.n_expert);
    w.set(k("expert_used_count"), p.n_expert_used);
  }
  if (p.key_length_keys) {
    w.set(k("attention.key_length"), p.head_dim);
    w.set(k("attention.value_length"), p.head_dim);
  }
  if (p.vocab_size_key) w.set(k("vocab_size"), p.n_vocab);
  if (p.rope_dimension_key) w.set(k("rope.dimension_count"), p.head_dim);
  if (p.n_expert) w.set(k("expert_feed_forward_length"), p.n_ff_exp);
  if (p.architecture == arch::llama4) w.set(k("interleave_moe_layer_step"), p.moe_step);
  w.set("general.file_type", std::uint32_t(ft.file_type));
  w.set("general.quantization_version", std::uint32_t(2));
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}

std::uint64_t elements(const std::vector<std::uint64_t>& ne) {
  std::uint64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

}  // namespace

model plan_model(const options& o) {
  model m;
  const preset* found = find_preset(o.preset);
  if (!found) throw usage_error("unknown preset '" + o.preset + "'; presets: " + names_of_presets());
  m.ft = find_ftype(o.type);
  if (!m.ft) throw usage_error("unknown type '" + o.type + "'; types: " + names_of_types());
  m.p = *found;
  if (o.n_layer) m.p.n_layer = o.n_layer;
  const preset& p = m.p;

  add_metadata(m.writer, p, *m.ft);
  if (o.vocab.empty()) add_vocab(m.writer, make_vocab(p));
  else copy_vocab(m.writer, o.vocab, p.n_vocab);

  const auto specs = tensor_specs(p);
  const auto types = assign_types(p, specs, *m.ft, o.pure);
  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  auto rope = std::make_shared<const std::vector<float>>(llama3_rope_factors(p));
  if (o.router != "uniform" && o.router != "skewed")
    throw usage_error("unknown --router '" + o.router + "'; routers: uniform, skewed");
  const bool skewed = o.router == "skewed" && p.n_expert > 0;
  const std::vector<float> rank_scales = skewed ? skewed_router_rank_scales(p.n_expert, p.n_expert_used) : std::vector<float>{};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& t = specs[i];
    if (!random_fill_supported(types[i]))
      throw error("no random block generator for type " + std::string(gguf::name_of(types[i])));
    fill_spec fs;
    fs.type = types[i];
    fs.role = t.role;
    fs.sigma = t.role == tensor_role::router ? router_sigma : weight_sigma;
    fs.seed = tensor_seed(o.seed, t.name);
    fs.nbytes = elements(t.ne) / gguf::block_elems(fs.type) * gguf::block_bytes(fs.type);
    if (t.role == tensor_role::rope_freqs) fs.values = rope;
    if (t.role == tensor_role::router && skewed) {  // ne = {n_embd, n_expert}: one row per expert
      fs.row_scale = std::make_shared<const std::vector<float>>(scales_for_layer(rank_scales, fs.seed));
      fs.row_elems = t.ne[0];
    }
    m.tensors.push_back({t.name, fs.type, t.ne, t.role, fs.nbytes});
    m.writer.add_tensor(t.name, fs.type, t.ne, [fs, threads](std::uint64_t off, std::span<std::byte> chunk) {
      fill_tensor(fs, off, chunk, threads);
    });
  }
  return m;
}

write_stats write_model(const model& m, const std::filesystem::path& path,
                        const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  // A device or pipe (-o /dev/null to time generation alone) is written in place; a regular file
  // goes through "<path>.tmp" so that a failed run never leaves a truncated model behind.
  std::error_code st_ec;
  const auto st = std::filesystem::status(path, st_ec);
  if (std::filesystem::is_directory(st)) throw error("'" + path.string() + "' is a directory");
  const bool special = std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
  const auto tmp = special ? path : std::filesystem::path(path.string() + ".tmp");
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t total = m.writer.file_size();
  try {
    async_file_sink sink(tmp);
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    std::thread monitor;
    if (progress)
      monitor = std::thread([&] {
        std::unique_lock lock(mu);
        while (!cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop; }))
          progress(sink.bytes_written(), total);
      });
    const auto finish_monitor = [&] {
      if (!monitor.joinable()) return;
      {
        const std::lock_guard lock(mu);
        stop = true;
      }
      cv.notify_all();
      monitor.join();
    };
    try {
      std::ostream os(&sink);
      m.writer.write(os);
      sink.close();
    } catch (const error& e) {
      finish_monitor();
      const std::string why = sink.error_message();
      throw error(why.empty() ? std::string(e.what()) : "writing '" + tmp.string() + "' failed: " + why);
    }
    finish_monitor();
    if (progress) progress(total, total);
  } catch (...) {
    std::error_code ec;
    if (!special) std::filesystem::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  if (!special) std::filesystem::rename(tmp, path, ec);
  if (ec) throw error("cannot rename '" + tmp.string() + "' to '" + path.string() + "': " + ec.message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {total, s};
}

std::string summary(const model& m) {
  std::map<std::string_view, std::pair<std::size_t, std::uint64_t>> by_type;  // count, bytes
  std::uint64_t bytes = 0, params = 0;
  for (const auto& t : m.tensors) {
    auto& e = by_type[gguf::name_of(t.type)];
    ++e.first;
    e.second += t.nbytes;
    bytes += t.nbytes;
    params += elements(t.ne);
  }
  std::ostringstream s;
  const std::uint64_t file = m.writer.file_size();
  char bpw[32];
  std::snprintf(bpw, sizeof bpw, "%.2f", 8.0 * double(bytes) / double(params));
  s << m.p.name << " " << m.ft->name << (m.ft->pure ? " (pure)" : "");
  if (const auto* real = find_preset(m.p.name); real && real->n_layer != m.p.n_layer)
    s << " (" << m.p.n_layer << " of " << real->n_layer << " layers)";
  s << ": " << m.tensors.size() << " tensors, "
    << params << " parameters, " << file << " bytes (" << human_bytes(double(file)) << "), " << bpw
    << " bits/weight\n";
  for (const auto& [name, e] : by_type)
    s << "  " << name << ": " << e.first << " tensors, " << e.second << " bytes (" << human_bytes(double(e.second))
      << ")\n";
  return s.str();
}

std::string list_text() {
  std::ostringstream s;
  s << "presets:\n";
  for (const auto& p : presets()) {
    const auto specs = tensor_specs(p);
    const auto* q4 = find_ftype("Q4_K_M");
    const auto types = assign_types(p, specs, *q4, false);
    std::uint64_t q4_bytes = 0;
    for (std::size_t i = 0; i < specs.size(); ++i)
      q4_bytes += elements(specs[i].ne) / gguf::block_elems(types[i]) * gguf::block_bytes(types[i]);
    char line[256];
    std::snprintf(line, sizeof line, "  %-22s %-8s L=%u embd=%u heads=%u/%u hd=%u ff=%u", std::string(p.name).c_str(),
                  std::string(arch_name(p.architecture)).c_str(), p.n_layer, p.n_embd, p.n_head, p.n_head_kv, p.head_dim,
                  p.n_ff);
    s << line;
    if (p.n_expert) s << " experts=" << p.n_expert << "x" << p.n_ff_exp << " top-" << p.n_expert_used;
    s << " vocab=" << p.n_vocab << " ctx=" << p.n_ctx << (p.tied ? " tied" : "") << "\n";
    const double n = double(parameter_count(p));
    std::snprintf(line, sizeof line, "%.2f%s", n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M");
    s << "  " << std::string(24, ' ') << line << " params, Q4_K_M tensors " << human_bytes(double(q4_bytes)) << "  ["
      << p.source << "]\n";
  }
  s << "types (general.file_type as llama-quantize writes it):\n";
  for (const auto& f : ftypes()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-7s %s\n", std::string(f.name).c_str(), std::string(f.summary).c_str());
    s << line;
  }
  return s.str();
}

}  // namespace strata::mkmodel
