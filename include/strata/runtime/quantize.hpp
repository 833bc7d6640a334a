// Model quantization (what strata-quantize runs): any GGUF in, the same model in another file
// type out, byte-identical to llama-quantize given the same input and options (tensor order,
// metadata, the type mix, the quantized bytes, padding). Multithreaded; reports each tensor.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/gguf/type_id.hpp"
#include "strata/quant/ftype.hpp"

namespace strata::rt {

struct quantize_params {
  std::filesystem::path input;
  std::filesystem::path output;
  quant::ftype ftype = quant::ftype::mostly_q8_0;
  unsigned threads = 0;           // 0: every hardware thread
  bool allow_requantize = false;  // accept already-quantized input tensors (dequantized first)
  bool pure = false;              // no mix: the file type's base type for every matrix
  bool leave_output = false;      // output.weight keeps its type
  bool dry_run = false;           // sizes only, nothing written
  std::optional<gguf::type_id> output_type;      // type of output.weight
  std::optional<gguf::type_id> token_embd_type;  // type of token_embd.weight
  // --tensor-type: (ECMAScript regex searched in the tensor name, type); the first match wins.
  std::vector<std::pair<std::string, gguf::type_id>> tensor_types;
  // --imatrix: the file, and the path as the user wrote it (stored in quantize.imatrix.file).
  std::filesystem::path imatrix;
  std::string imatrix_name;
  std::vector<std::string> include_weights;  // use the imatrix only for names containing one of these
  std::vector<std::string> exclude_weights;  // do not use it for names containing one of these
};

// One tensor, as it is processed (for logs and progress).
struct quantize_tensor_report {
  std::size_t index = 0, count = 0;   // 1-based position, number of tensors
  std::string name;
  std::string shape;                  // "[256, 1024]"
  gguf::type_id from{}, to{};
  std::uint64_t bytes_in = 0, bytes_out = 0;
  bool converted = false;             // false: copied as it was
  bool fallback = false;              // the mix's type did not fit the row length
  bool used_imatrix = false;
  std::string note;                   // e.g. "no imatrix entry"
};

struct quantize_summary {
  std::uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
  std::uint64_t n_elements = 0;
  std::size_t n_tensors = 0, n_fallback = 0;
  std::size_t imatrix_entries = 0;
  double seconds = 0;
};

// Throws strata::error naming the file, tensor and reason on any bad input.
quantize_summary quantize_model(const quantize_params& p,
                                const std::function<void(const quantize_tensor_report&)>& on_tensor = {});

}  // namespace strata::rt
