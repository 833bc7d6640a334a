// libFuzzer target for gguf::reader: any input must either parse, with every view it exposes
// inside the input (each metadata value and the ends of each tensor view are read, so ASan sees
// a bad view), or throw strata::error. Anything else (crash, other exception, UB, hang, memory
// blow-up) is a finding. Build and run: tools/run_fuzz.sh [seconds].
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "support/gguf_walk.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const strata::gguf::reader r(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.gguf");
    volatile std::uint64_t sink = strata::test::walk_all(r);
    (void)sink;
  } catch (const strata::error&) {
  }
  return 0;
}
