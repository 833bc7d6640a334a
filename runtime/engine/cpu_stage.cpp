// The CPU backend in the engine: how a stage makes and describes it, and the CPU decoder of every
// architecture (arch/all.hpp), instantiated here once.
#include "decoder_stage.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::rt {

template <>
struct engine_backend<kernels::cpu::backend> {
  static std::unique_ptr<kernels::cpu::backend> make(const engine_options& opt, const layer_slice&) {
    return std::make_unique<kernels::cpu::backend>(opt.threads ? opt.threads : kernels::cpu::thread_pool::physical_cores(),
                                                   select_kernel_table(engine_isa()));
  }
  static std::string describe(const kernels::cpu::backend& be) {
    return "cpu (" + std::to_string(be.threads()) + " threads, " + std::string(kernels::cpu::name_of(engine_isa())) + ")";
  }
};

std::unique_ptr<stage> make_cpu_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& layers) {
  return make_decoder_stage<kernels::cpu::backend>(r, opt, layers);
}

}  // namespace strata::rt
