#include "pipelines.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include <unistd.h>

#include "quant_layout.hpp"
#include "shader_sources.hpp"
#include "strata/core/error.hpp"
#include "strata/turboquant/glsl_layout.hpp"

namespace strata::gpu {
namespace fs = std::filesystem;

std::string pipeline_request::key() const {
  std::string k = shader + "|" + (format ? std::string(gguf::name_of(*format)) : "") + "|" + std::to_string(bindings);
  for (const auto& [n, v] : defines) k += "|" + n + "=" + v;
  return k;
}

std::string pipeline_request::label() const {
  std::string l = shader;
  if (format) l += "." + std::string(gguf::name_of(*format));
  for (const auto& [n, v] : defines)
    if (n != "WG") l += "." + n + (v.empty() || v == "1" ? "" : "=" + v);
  return l;
}

pipeline_registry::pipeline_registry(const context& ctx, fs::path cache_dir)
    : ctx_(&ctx),
      compiler_(cache_dir, ctx.info().name + "|" + ctx.info().driver + "|" + std::to_string(ctx.info().driver_version)) {
  std::vector<char> blob;
  if (!compiler_.cache_dir().empty()) {
    cache_file_ = compiler_.cache_dir() / ("pipelines-" + ctx.info().uuid + ".bin");
    std::ifstream in(cache_file_, std::ios::binary | std::ios::ate);
    if (in) {
      blob.resize(std::size_t(in.tellg()));
      in.seekg(0);
      if (!in.read(blob.data(), std::streamsize(blob.size()))) blob.clear();
    }
  }
  // The driver validates the blob header (vendor, device, UUID) and ignores a stale one.
  cache_ = vk::raii::PipelineCache(ctx.device(), vk::PipelineCacheCreateInfo({}, blob.size(), blob.data()));
}

pipeline_registry::~pipeline_registry() {
  try {
    save_cache();
  } catch (...) {  // a cache that cannot be written only costs start-up time next run
  }
}

void pipeline_registry::save_cache() const {
  if (cache_file_.empty()) return;
  const auto data = cache_.getData();
  // A name of this process's own: processes sharing a cache directory (parallel tests, several
  // servers) would otherwise interleave their writes into one temporary file and rename a mix.
  const fs::path tmp = cache_file_.string() + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  out.close();
  std::error_code ec;
  if (out) fs::rename(tmp, cache_file_, ec);
}

namespace {
// "name=value, ..." of each executable the driver reports for a pipeline made with
// eCaptureStatisticsKHR (executables separated by "; ").
std::string executable_statistics(const vk::raii::Device& dev, vk::Pipeline pl) {
  std::string out;
  const auto execs = dev.getPipelineExecutablePropertiesKHR(vk::PipelineInfoKHR(pl));
  for (std::uint32_t i = 0; i < execs.size(); ++i) {
    if (i) out += "; ";
    bool first = true;
    for (const auto& st : dev.getPipelineExecutableStatisticsKHR(vk::PipelineExecutableInfoKHR(pl, i))) {
      std::string v;
      switch (st.format) {
        case vk::PipelineExecutableStatisticFormatKHR::eBool32: v = st.value.b32 ? "yes" : "no"; break;
        case vk::PipelineExecutableStatisticFormatKHR::eInt64: v = std::to_string(st.value.i64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eUint64: v = std::to_string(st.value.u64); break;
        case vk::PipelineExecutableStatisticFormatKHR::eFloat64: v = std::to_string(st.value.f64); break;
      }
      out += (first ? "" : ", ") + std::string(st.name.data()) + "=" + v;
      first = false;
    }
  }
  return out;
}
// Removes the shaders' [[unroll]] loop hints. On a device that runs shaders on the CPU (lavapipe:
// Mesa's LLVM JIT compiles each pipeline when it first runs) fully unrolled loops around
// barriers made the compile cost of CI's Vulkan tests: the grouped compressed-KV decode test
// took 115 s from a cold shader cache with the hints and 38 s without, and the release suite's
// lavapipe cases 955 -> 705 test-seconds cold, 414 -> 376 warm (bench/RESULTS.md, session 39).
// A hint changes no result, only how the driver lays the loop out; GPUs keep them.
void drop_unroll_hints(std::string& src) {
  static constexpr std::string_view hint = "[[unroll]]";
  for (std::size_t at = 0; (at = src.find(hint, at)) != std::string::npos;) src.erase(at, hint.size());
}
}  // namespace

std::string assemble_source(const pipeline_request& r) {
  std::string s = "#version 450\n";
  bool has_wg = false;
  for (const auto& [n, v] : r.defines) {
    s += "#define " + n + " " + v + "\n";
    has_wg |= n == "WG";
  }
  if (!has_wg) s += "#define WG 128\n";
  s += "#define MIN_SUBGROUP 4\n";  // lower bound on any device's subgroup size: sizes shared arrays
  if (r.format) s += "#define HAS_WEIGHTS 1\n" + glsl_layout(*r.format);
  // Compressed KV kernels: the TurboQuant layout of each TurboQuant side, generated from the
  // C++ format (KV_D = head_dim, KV_K_TQ / KV_V_TQ = bits), then the shared KV helpers.
  std::uint32_t kv_d = 0;
  for (const auto& [n, v] : r.defines)
    if (n == "KV_D") kv_d = std::uint32_t(std::stoul(v));
  if (kv_d)
    for (const auto& [n, v] : r.defines)
      if (n == "KV_K_TQ" || n == "KV_V_TQ")
        s += turboquant::glsl_layout(turboquant::format(kv_d, std::uint32_t(std::stoul(v))), n == "KV_K_TQ" ? "K" : "V");
  s += shader_source("common");
  if (kv_d) s += shader_source("kv_codec");
  for (const auto& [n, v] : r.defines)
    if (kv_d && n == "KV_ENCODE") s += shader_source("kv_encode");  // after kv_codec, before the shader
  if (r.format) s += shader_source(glsl_dequant_source(*r.format));
  // Tails run by a dispatch's last workgroup (the next norm, the router's top-k, the MoE
  // combine, the split attention's merge), and the top-k of moe.glsl.
  const auto has = [&](std::string_view name) {
    return std::any_of(r.defines.begin(), r.defines.end(), [&](const auto& d) { return d.first == name; });
  };
  if (has("ROUTER_PARTS")) s += shader_source("router_parts");  // before the block tails that call it
  if (has("NORM_TAIL") || has("TOPK_TAIL") || has("MOE_COMBINE_TAIL")) s += shader_source("last_workgroup");
  if (has("NORM_TAIL")) s += shader_source("norm_tail");
  if (has("MOE_COMBINE_TAIL")) s += shader_source("moe_combine_tail");
  if (has("MOE_BLOCK_TAIL")) s += shader_source("moe_block_tail");
  if (has("SPLIT_COMBINE")) s += shader_source("split_combine");
  if (has("ATTN_F16_OUT")) s += shader_source("attn_f16_out");
  if (r.shader == "attn_prep" || has("HEAD_OPS")) s += shader_source("head_ops");  // per-head norms and RoPE
  if (has("HEAD_OPS")) s += shader_source("head_ops_kv");  // the attention kernels' part: bindings, ho_run()
  if (has("TOPK_TAIL") || has("TOPK_IN") || (r.shader == "moe" && has("MOE_TOPK"))) s += shader_source("moe_topk");
  s += shader_source(r.shader);
  // attention_qdec's two forms, LANES and thread-a-key: a file each, after the kernel's bindings, decoders and helpers.
  if (r.shader == "attention_qdec") s += shader_source(has("LANES") ? "attention_qdec_lanes" : "attention_qdec_keys");
  return s;
}

std::unique_ptr<pipeline> pipeline_registry::build(const pipeline_request& r) {
  std::string src = assemble_source(r);
  if (ctx_->info().is_cpu) drop_unroll_hints(src);
  const auto spirv = compiler_.compile(r.label(), src);
  auto p = std::make_unique<pipeline>();
  p->label = r.label();
  p->bindings = r.bindings;
  for (const auto& [k, v] : r.defines)
    if (k == "W_SOURCES") p->weight_sources = std::uint32_t(std::stoul(v));
  if (p->weight_sources != 1 && (p->weight_sources != 2 || !ctx_->info().storage_array_indexing))
    throw error("kernel '" + r.label() + "': " + std::to_string(p->weight_sources) +
                " weight sources need shaderStorageBufferArrayDynamicIndexing and at most 2");
  std::vector<vk::DescriptorSetLayoutBinding> b;
  for (std::uint32_t i = 0; i < r.bindings; ++i)
    b.emplace_back(i, vk::DescriptorType::eStorageBuffer, i == 0 ? p->weight_sources : 1, vk::ShaderStageFlagBits::eCompute);
  const auto& dev = ctx_->device();
  p->set_layout = vk::raii::DescriptorSetLayout(
      dev, vk::DescriptorSetLayoutCreateInfo(vk::DescriptorSetLayoutCreateFlagBits::ePushDescriptorKHR, b));
  const vk::PushConstantRange pc(vk::ShaderStageFlagBits::eCompute, 0, push_constant_bytes);
  const vk::DescriptorSetLayout sl = *p->set_layout;
  p->layout = vk::raii::PipelineLayout(dev, vk::PipelineLayoutCreateInfo({}, sl, pc));
  const vk::raii::ShaderModule module(dev, vk::ShaderModuleCreateInfo({}, spirv.size() * 4, spirv.data()));
  const vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, *module, "main");
  try {
    const bool stats = ctx_->info().pipeline_stats;
    const vk::PipelineCreateFlags flags = stats ? vk::PipelineCreateFlagBits::eCaptureStatisticsKHR : vk::PipelineCreateFlags{};
    const auto t0 = std::chrono::steady_clock::now();
    p->handle = vk::raii::Pipeline(dev, cache_, vk::ComputePipelineCreateInfo(flags, stage, *p->layout));
    if (ctx_->info().pipeline_times)
      std::fprintf(stderr, "strata: pipeline %s created in %.1f ms\n", p->label.c_str(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (stats) try {
        p->stats = executable_statistics(dev, *p->handle);
        std::fprintf(stderr, "strata: pipeline %s: %s\n", p->label.c_str(), p->stats.c_str());
      } catch (const vk::SystemError& e) {  // a lab tool: the pipeline itself is fine
        p->stats = std::string("statistics unavailable: ") + e.what();
      }
  } catch (const vk::SystemError& e) {
    throw error("creating pipeline '" + r.label() + "' failed: " + e.what());
  }
  return p;
}

void pipeline_registry::prepare(std::span<const pipeline_request> requests, const progress_fn& progress) {
  std::vector<const pipeline_request*> todo;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : requests)
      if (!built_.count(r.key()) &&
          std::none_of(todo.begin(), todo.end(), [&](auto* t) { return t->key() == r.key(); }))
        todo.push_back(&r);
  }
  if (todo.empty()) return;
  std::vector<std::unique_ptr<pipeline>> out(todo.size());
  std::vector<std::string> errors(todo.size());
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex progress_mu;  // progress callbacks are not thread-safe
  const unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), unsigned(todo.size())));
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < n; ++w)
    workers.emplace_back([&] {
      for (std::size_t i; (i = next++) < todo.size();) {
        try {
          out[i] = build(*todo[i]);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
        if (progress) {
          const std::lock_guard lock(progress_mu);
          progress({"compile", ++done, todo.size(), "pipelines"});
        }
      }
    });
  for (auto& t : workers) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw error(e);
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < todo.size(); ++i) built_.emplace(todo[i]->key(), std::move(out[i]));
  save_cache();
}

const pipeline& pipeline_registry::get(const pipeline_request& r) {
  {
    std::lock_guard lock(mu_);
    if (auto it = built_.find(r.key()); it != built_.end()) return *it->second;
  }
  prepare(std::span(&r, 1));
  std::lock_guard lock(mu_);
  return *built_.at(r.key());
}

std::size_t pipeline_registry::size() const {
  std::lock_guard lock(mu_);
  return built_.size();
}

}  // namespace strata::gpu
