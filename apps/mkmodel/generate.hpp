// strata-mkmodel's generator as a library: plan a model (metadata, tensor infos, per-tensor types,
// fill callbacks; no tensor data is produced until it is written), write it streaming, summarise.
// main.cpp is only the command line around these; tests call them directly.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "presets.hpp"
#include "quant_mix.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/writer.hpp"

namespace strata::mkmodel {

// Bad command-line input (unknown preset or type): the message lists the valid names.
class usage_error : public error {
 public:
  using error::error;
};

struct options {
  std::string preset;                // presets() name
  std::string type = "Q4_K_M";       // ftypes() name
  bool pure = false;                 // like llama-quantize --pure
  std::uint64_t seed = 1;            // same seed -> identical bytes
  std::filesystem::path vocab;       // copy tokenizer.* from this GGUF instead of synthesising
  unsigned threads = 0;              // generation threads, 0 = hardware concurrency
  std::uint32_t n_layer = 0;         // keep the real per-layer shapes but this many blocks (0 = all)
  std::string router = "uniform";    // uniform | skewed (router_skew.hpp): MoE routing statistics
};

struct planned_tensor {
  std::string name;
  gguf::type_id type;
  std::vector<std::uint64_t> ne;     // ggml order
  tensor_role role;
  std::uint64_t nbytes;
};

struct model {
  preset p{};                        // the preset, with block_count overridden by options::n_layer
  const ftype_info* ft = nullptr;
  std::vector<planned_tensor> tensors;
  gguf::writer writer;               // metadata + tensors with their fill callbacks
};

// Throws usage_error for an unknown preset or type, error for an unusable --vocab file.
model plan_model(const options& o);

struct write_stats {
  std::uint64_t bytes = 0;
  double seconds = 0;
};
// Streams the file to "<path>.tmp" (generation overlapped with the disk writes), then renames it
// to `path`; on failure the temporary file is removed and error is thrown. A `path` that exists and
// is not a regular file (/dev/null, a pipe) is written directly. `progress` (optional)
// is called about twice a second with (bytes written, total).
write_stats write_model(const model& m, const std::filesystem::path& path,
                        const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

// Tensor count, file size, parameter count and bits per weight, types by count and by bytes.
std::string summary(const model& m);

// --list text: presets with their dims and sizes, and the file types.
std::string list_text();

}  // namespace strata::mkmodel
