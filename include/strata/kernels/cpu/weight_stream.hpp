// Weights the CPU backend does not keep resident (the disk tier, issue 14 item 5): a stream
// places some tensors at fixed addresses in memory it fills while the decoder runs (a ring of
// block slots read from the model file; runtime/tiers/block_stream.hpp), and the decoder tells
// it where each block starts and ends so it can wait for a block's bytes and then reuse its
// slot. The backend calls it; the stream knows nothing of kernels.
#pragma once
#include <cstddef>
#include <cstdint>

#include "strata/gguf/tensor_info.hpp"

namespace strata::kernels::cpu {

class weight_stream {
 public:
  virtual ~weight_stream() = default;
  // The address the tensor's bytes will have while its block runs (fixed for the stream's
  // lifetime), or null when the tensor is resident (the backend then loads it as usual).
  virtual const std::byte* place(const gguf::tensor_info& t) = 0;
  // A step of n tokens begins (counters only).
  virtual void begin_step(std::size_t n_tokens) = 0;
  // Block il is about to run: returns when its streamed tensors are at their addresses (throws
  // the reader's error, naming the file and offset). end_block(il): its ops are done with them.
  virtual void begin_block(std::uint32_t il) = 0;
  virtual void end_block(std::uint32_t il) = 0;
};

}  // namespace strata::kernels::cpu
