// Explicit instantiation of the CPU model for the llama architecture (declared extern in
// runtime/engine/model.cpp, so each architecture compiles in its own translation unit).
#include "../engine/cpu_model.hpp"
#include "strata/arch/llama.hpp"

namespace strata::rt {
template std::unique_ptr<model> make_cpu_model<arch::llama>(std::unique_ptr<gguf::file>, const engine_options&);
}  // namespace strata::rt
