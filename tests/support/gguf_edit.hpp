// An editable copy of a GGUF file for tests that craft bad models: metadata values and the tensor
// table (names, types, shapes) can be changed, then the file is written with each tensor's bytes
// taken from the original (repeated or cut when the new shape has another size).
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/mapped_file.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"

namespace strata::test {

class gguf_edit {
 public:
  struct tensor {
    std::string name;
    gguf::type_id type;
    std::vector<std::uint64_t> ne;
    std::span<const std::byte> data;  // the original bytes (the source file stays mapped)
  };

  explicit gguf_edit(const std::filesystem::path& path) : file_(path), reader_(file_.bytes(), path.string()) {
    for (const auto& [key, v] : reader_.metadata()) meta.emplace_back(std::string(key), gguf::owned_value::from(v));
    for (const auto& t : reader_.tensors())
      tensors.push_back({std::string(t.name), t.type, {t.ne.begin(), t.ne.begin() + t.n_dims}, t.data});
  }

  const gguf::reader& original() const noexcept { return reader_; }
  std::string arch() const { return std::string(reader_.get_string("general.architecture")); }

  template <class T>
  void set(const std::string& key, T x) {
    set_value(key, gguf::owned_value::scalar(x));
  }
  void set_value(const std::string& key, gguf::owned_value v) {
    for (auto& [k, old] : meta)
      if (k == key) {
        old = std::move(v);
        return;
      }
    meta.emplace_back(key, std::move(v));
  }
  void remove(const std::string& key) {
    std::erase_if(meta, [&](const auto& kv) { return kv.first == key; });
  }
  tensor* find(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }

  // Bytes of the file as edited; throws strata::error for a table the writer refuses (e.g. a row
  // that is not a whole number of quant blocks).
  void write(const std::filesystem::path& out) const {
    gguf::writer w;
    for (const auto& [k, v] : meta) w.set(k, v);
    for (const auto& t : tensors) {
      const auto src = t.data;
      w.add_tensor(t.name, t.type, t.ne, [src](std::uint64_t off, std::span<std::byte> chunk) {
        for (std::size_t i = 0; i < chunk.size(); ++i)
          chunk[i] = src.empty() ? std::byte{0} : src[(off + i) % src.size()];
      });
    }
    w.write(out);
  }

  std::vector<std::pair<std::string, gguf::owned_value>> meta;
  std::vector<tensor> tensors;

 private:
  mapped_file file_;
  gguf::reader reader_;
};

}  // namespace strata::test
