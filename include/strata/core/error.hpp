// Error type of the whole library: one exception class carrying a message that names what
// was wrong and where (file, key, tensor, byte offset). Entry points throw it for bad input;
// nothing in the library aborts on data it was handed.
#pragma once
#include <stdexcept>
#include <string>

namespace strata {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when a file (GGUF, fixture, ...) is malformed; the message starts with the path.
class format_error : public error {
 public:
  using error::error;
};

}  // namespace strata
