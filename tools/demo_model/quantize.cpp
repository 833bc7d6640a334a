// The demo-model recipe's quantizer (built by make_model.sh, not part of the CMake/Meson builds):
// the F32 GGUF of export_gguf.py -> TYPE with llama-quantize's mix, through
// apps/mkmodel/requantize.hpp (Strata's reader, writer, reference quantizers and quant/mix.hpp).
//   quantize IN.gguf OUT.gguf TYPE        (TYPE: a llama-quantize type name, e.g. Q8_0, Q4_K_M)
#include <cstdio>
#include <iostream>

#include "requantize.hpp"

int main(int argc, char** argv) {
  using namespace strata;
  if (argc != 4) {
    std::cerr << "usage: quantize IN.gguf OUT.gguf TYPE\n";
    return 2;
  }
  try {
    const auto* ft = quant::find_ftype(argv[3]);
    if (!ft) throw error(std::string("unknown type '") + argv[3] + "'");
    const gguf::file in(argv[1]);
    const auto q = mkmodel::requantize(in.gguf(), ft->id);
    for (const auto& [name, type] : q.types) std::printf("%-28s %s\n", name.c_str(), std::string(gguf::name_of(type)).c_str());
    q.writer.write(std::filesystem::path(argv[2]));
    std::printf("wrote %s (%s)\n", argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "quantize: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
