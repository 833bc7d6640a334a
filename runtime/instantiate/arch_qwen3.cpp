// Explicit instantiation of the CPU model for the qwen3 architecture (declared extern in
// runtime/engine/model.cpp, so each architecture compiles in its own translation unit).
#include "../engine/cpu_model.hpp"
#include "strata/arch/qwen3.hpp"

namespace strata::rt {
template std::unique_ptr<model> make_cpu_model<arch::qwen3>(std::unique_ptr<gguf::file>, const engine_options&);
}  // namespace strata::rt
