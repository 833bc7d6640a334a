// Explicit instantiation of the Vulkan and the GPU/CPU split models for the qwen3_moe architecture (declared extern in
// runtime/engine/model.cpp; built only with STRATA_VULKAN).
#include "../engine/hybrid_model.hpp"
#include "../engine/vulkan_model.hpp"
#include "strata/arch/qwen3_moe.hpp"

namespace strata::rt {
template std::unique_ptr<model> make_vulkan_model<arch::qwen3_moe>(std::unique_ptr<gguf::file>, const engine_options&);
template std::unique_ptr<model> make_hybrid_model<arch::qwen3_moe>(std::unique_ptr<gguf::file>, const engine_options&);
}  // namespace strata::rt
