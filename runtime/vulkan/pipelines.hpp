// Compute pipelines built from the embedded GLSL: source assembly (#defines + generated quant
// layout + common prelude + dequantizer + kernel), parallel compilation, and a VkPipelineCache
// persisted next to the SPIR-V cache. Descriptors are pushed per dispatch
// (VK_KHR_push_descriptor), so there are no descriptor pools or sets to manage.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "strata/core/progress.hpp"
#include "context.hpp"
#include "shader_compiler.hpp"
#include "strata/gguf/type_id.hpp"

namespace strata::gpu {

// The push-constant range of every pipeline: the size every Vulkan device supports
// (maxPushConstantsSize >= 128); a dispatch pushes only its own block (push_constants.hpp).
inline constexpr std::uint32_t push_constant_bytes = 128;

struct pipeline_request {
  std::string shader;                       // kernel source under shaders/, e.g. "matvec"
  std::optional<gguf::type_id> format;      // weight format read at binding 0, if any
  std::vector<std::pair<std::string, std::string>> defines;
  std::uint32_t bindings = 8;               // storage-buffer bindings 0..bindings-1

  std::string key() const;
  std::string label() const;                // short name for profiles and errors
};

// The GLSL of a request: #version, its #defines, the weight format's generated layout, the
// common prelude, the dequantizer and the kernel (needs no device: tests compile it offline).
std::string assemble_source(const pipeline_request& r);

struct pipeline {
  std::string label;
  std::uint32_t bindings = 0;
  std::uint32_t weight_sources = 1;  // binding 0's buffers (define W_SOURCES: GPU-cached experts' slots and host copy)
  vk::raii::DescriptorSetLayout set_layout{nullptr};
  vk::raii::PipelineLayout layout{nullptr};
  vk::raii::Pipeline handle{nullptr};
  // The driver's statistics ("name=value, ..." per executable) where device_info::pipeline_stats.
  std::string stats;
};

class pipeline_registry {
 public:
  pipeline_registry(const context& ctx, std::filesystem::path cache_dir);
  ~pipeline_registry();

  // Builds every request not built yet, on all cores; `progress` hears each one ("compile").
  void prepare(std::span<const pipeline_request> requests, const progress_fn& progress = {});
  // The pipeline for r (built now if prepare() did not).
  const pipeline& get(const pipeline_request& r);

  std::size_t size() const;
  const shader_compiler& compiler() const noexcept { return compiler_; }

 private:
  std::unique_ptr<pipeline> build(const pipeline_request& r);
  void save_cache() const;

  const context* ctx_;
  std::filesystem::path cache_file_;
  shader_compiler compiler_;
  vk::raii::PipelineCache cache_{nullptr};
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<pipeline>> built_;
};

}  // namespace strata::gpu
