// CPU activation tensors (row-major float views into owned buffers) and weight views
// (zero-copy GGUF tensor data plus the format kernels chosen for it at load time).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "strata/gguf/tensor_info.hpp"
#include "strata/kernels/cpu/format_kernels.hpp"

namespace strata::kernels::cpu {

// View of `rows` rows of `cols` floats, consecutive rows `stride` floats apart.
struct tensor {
  float* data = nullptr;
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint32_t stride = 0;

  float* row(std::size_t r) const noexcept { return data + r * stride; }
  tensor first_rows(std::uint32_t n) const noexcept { return {data, n, cols, stride}; }
  tensor first_cols(std::uint32_t n) const noexcept { return {data, rows, n, stride}; }
  // Contiguous tensors only: view each row as `parts` rows (e.g. one row per attention head).
  tensor split_rows(std::uint32_t parts) const noexcept {
    return {data, rows * parts, cols / parts, cols / parts};
  }
};

// 64-byte aligned float buffer for activations, sized once before the hot path.
class buffer {
 public:
  buffer() = default;
  buffer(std::uint32_t rows, std::uint32_t cols) : rows_(rows), cols_(cols) {
    const std::size_t bytes = (std::size_t(rows) * cols * sizeof(float) + 63) / 64 * 64;
    data_.reset(static_cast<float*>(::operator new(bytes ? bytes : 64, std::align_val_t(64))));
  }
  tensor view(std::uint32_t rows) const noexcept { return {data_.get(), rows, cols_, cols_}; }
  tensor all() const noexcept { return view(rows_); }
  std::uint32_t rows() const noexcept { return rows_; }

 private:
  struct deleter {
    void operator()(float* p) const noexcept { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<float, deleter> data_;
  std::uint32_t rows_ = 0, cols_ = 0;
};

// Bytes owned by the backend (packed weights), sized once at load. Buffers of at least one huge
// page are 2 MiB aligned and asked for transparent huge pages (Linux madvise; the default
// "madvise" THP mode gives none otherwise): decode streams every weight once per token, and with
// 4 KiB pages each page is a TLB miss and a stop for the hardware prefetchers.
class byte_buffer {
 public:
  static constexpr std::size_t huge_page = std::size_t(2) << 20;
  explicit byte_buffer(std::size_t bytes)
      : align_(bytes >= huge_page ? huge_page : 64),
        data_(static_cast<std::uint8_t*>(::operator new(round_up(bytes ? bytes : 64, align_), std::align_val_t(align_))),
              deleter{align_}) {
#ifdef __linux__
    if (align_ == huge_page) ::madvise(data_.get(), round_up(bytes, align_), MADV_HUGEPAGE);  // advice only
#endif
  }
  std::uint8_t* data() const noexcept { return data_.get(); }

 private:
  static std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
  struct deleter {
    std::size_t align = 64;
    void operator()(std::uint8_t* p) const noexcept { ::operator delete(p, std::align_val_t(align)); }
  };
  std::size_t align_;
  std::unique_ptr<std::uint8_t, deleter> data_;
};

// A weight matrix {ne0 = K inputs, ne1 = N outputs[, ne2 = experts]} in its GGUF format.
struct weight {
  const std::byte* data = nullptr;
  gguf::type_id type = gguf::type_id::f32;
  std::uint64_t ne[4] = {0, 1, 1, 1};
  std::size_t row_bytes = 0;                 // bytes of one row of ne0 elements
  const format_kernels* kernels = nullptr;   // chosen at load time for the running ISA
  std::string_view name;
  // The same matrix in the format's packed layout (packed_gemm.hpp), which matmul then uses;
  // null when the format has none or the tensor is not packed (token_embd: get_rows only).
  const std::uint8_t* packed = nullptr;
  std::size_t packed_slab_bytes = 0;         // bytes per expert (2-D slab) of `packed`

  explicit operator bool() const noexcept { return data != nullptr; }
  const std::byte* row(std::size_t r) const noexcept { return data + r * row_bytes; }
  // Expert e of a 3-D expert tensor, as a 2-D {ne0, ne1} weight.
  weight slab(std::size_t e) const noexcept {
    weight w = *this;
    w.data = data + e * row_bytes * ne[1];
    if (packed) w.packed = packed + e * packed_slab_bytes;
    w.ne[2] = 1;
    return w;
  }
};

}  // namespace strata::kernels::cpu
