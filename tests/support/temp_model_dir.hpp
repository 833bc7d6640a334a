// Test support: a test's own temporary folder, removed with what it holds when the test ends, and
// fixture models requantized into it: with its O projections (attn_output) in one format (the rest
// Q4_K_M), for the runtime tests that compare a decode form per projection format, or all Q8_0.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

#include "strata/gguf/type_id.hpp"
#include "strata/quant/ftype.hpp"
#include "strata/runtime/quantize.hpp"

namespace strata::test {

class temp_model_dir {
 public:
  explicit temp_model_dir(std::string_view tag)
      : path_(std::filesystem::temp_directory_path() / ("strata-" + std::string(tag) + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~temp_model_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_model_dir(const temp_model_dir&) = delete;
  temp_model_dir& operator=(const temp_model_dir&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

  // `model` requantized as Q4_K_M with its O projections in `o_type`, as <o_type>.gguf here.
  std::filesystem::path with_attn_output(const std::filesystem::path& model, gguf::type_id o_type) const {
    rt::quantize_params qp;
    qp.input = model;
    qp.output = path_ / (std::string(gguf::name_of(o_type)) + ".gguf");
    qp.ftype = quant::ftype::mostly_q4_k_m;
    qp.allow_requantize = true;
    qp.threads = 2;
    qp.tensor_types = {{"attn_output", o_type}};
    rt::quantize_model(qp);
    return qp.output;
  }

  // `model` requantized as Q8_0 (every matrix of one format and row width), as Q8_0.gguf here.
  std::filesystem::path as_q8_0(const std::filesystem::path& model) const {
    rt::quantize_params qp;
    qp.input = model;
    qp.output = path_ / "Q8_0.gguf";
    qp.ftype = quant::ftype::mostly_q8_0;
    qp.allow_requantize = true;
    qp.threads = 2;
    rt::quantize_model(qp);
    return qp.output;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::test
