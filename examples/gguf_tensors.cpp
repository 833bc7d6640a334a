// Opens a GGUF file and prints its metadata count and every tensor (name, type, shape, bytes),
// using only the header-only library.
//   gguf_tensors MODEL.gguf
#include <cstdio>
#include <exception>

#include <strata/gguf/reader.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  try {
    const auto f = strata::gguf::open(argv[1]);  // maps the file; tensors are views into it
    std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors\n", argv[1], f->version(), f->metadata().size(),
                f->tensors().size());
    if (const auto arch = f->find_string("general.architecture"))
      std::printf("architecture: %.*s\n", int(arch->size()), arch->data());
    std::uint64_t total = 0;
    for (const auto& t : f->tensors()) {
      std::printf("%-32.*s %-6.*s %-20s %10llu bytes\n", int(t.name.size()), t.name.data(),
                  int(strata::gguf::name_of(t.type).size()), strata::gguf::name_of(t.type).data(),
                  t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes));
      total += t.nbytes;
    }
    std::printf("total: %llu bytes of tensor data\n", static_cast<unsigned long long>(total));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
