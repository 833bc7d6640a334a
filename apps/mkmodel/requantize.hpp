// Requantization of a whole GGUF: every tensor is dequantized to F32 and quantized again with
// Strata's reference quantizers (byte-exact with ggml's quantize_row_*_ref, what llama-quantize
// runs without an importance matrix) to the per-tensor types of llama-quantize's mix for the file
// type (include/strata/quant/mix.hpp). Metadata is copied; general.file_type and
// general.quantization_version are updated. Used by the demo-model recipe
// (tools/demo_model/quantize.cpp) and by the tests that derive the Q4_K_M demo model from the
// committed Q8_0 file.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"
#include "strata/quant/ftype.hpp"

namespace strata::mkmodel {

// The requantized file as a writer (tensor bytes are owned by the returned object), plus each
// tensor's name and chosen type, in file order.
struct requantized {
  gguf::writer writer;
  std::vector<std::vector<std::byte>> data;
  std::vector<std::pair<std::string, gguf::type_id>> types;
};

// Throws strata::error naming the tensor when a type has no dequantizer or quantizer.
requantized requantize(const gguf::reader& in, quant::ftype ft);

}  // namespace strata::mkmodel
