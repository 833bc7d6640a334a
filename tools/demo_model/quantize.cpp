// Quantizes the demo model's F32 GGUF (export_gguf.py) with Strata's own pieces: the GGUF reader
// and writer, the reference quantizers of include/strata/quant (byte-exact with ggml's
// quantize_row_*_ref, i.e. llama-quantize without an importance matrix) and llama-quantize's
// per-tensor mix as strata-mkmodel implements it (apps/mkmodel/quant_mix.cpp). Every metadata key
// is copied; general.file_type and general.quantization_version are set for the new type.
// A recipe tool, built by tools/demo_model/make_model.sh (not part of the CMake/Meson builds):
//   quantize IN-F32.gguf OUT.gguf TYPE        (TYPE: any strata-mkmodel --type, e.g. Q8_0, Q4_K_M)
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "quant_mix.hpp"
#include "strata/core/mapped_file.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"
#include "strata/quant/all.hpp"

namespace {

using namespace strata;

// The preset fields quant_mix reads (layer count, heads, experts), from the file's hyper-parameters.
mkmodel::preset preset_of(const gguf::reader& r) {
  const std::string a(r.get_string("general.architecture"));
  const auto u32 = [&](const char* k, std::uint32_t def) {
    const auto* v = r.find(a + "." + k);
    return v ? std::uint32_t(v->as_uint()) : def;
  };
  mkmodel::preset p{};
  p.n_layer = u32("block_count", 0);
  p.n_head = u32("attention.head_count", 0);
  p.n_head_kv = u32("attention.head_count_kv", p.n_head);
  p.n_expert = u32("expert_count", 0);
  return p;
}

int layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  return std::stoi(std::string(name.substr(4, name.find('.', 4) - 4)));
}

// Rows of F32 values -> rows of Fmt blocks.
template <class Fmt>
std::vector<std::byte> quantize_rows(std::span<const float> x) {
  constexpr std::size_t be = Fmt::block_elems;
  std::vector<std::byte> out(x.size() / be * sizeof(typename Fmt::block));
  auto* blocks = reinterpret_cast<typename Fmt::block*>(out.data());
  for (std::size_t i = 0; i * be < x.size(); ++i) {
    if constexpr (requires { Fmt::quantize(std::span<const float, be>(x.data(), be)); })
      blocks[i] = Fmt::quantize(std::span<const float, be>(x.data() + i * be, be));
    else
      throw error(std::string("no reference quantizer for ") + std::string(Fmt::name));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: quantize IN-F32.gguf OUT.gguf TYPE\n";
    return 2;
  }
  try {
    const gguf::file in(argv[1]);
    const auto& r = in.gguf();
    const auto* ft = mkmodel::find_ftype(argv[3]);
    if (!ft) throw error(std::string("unknown type '") + argv[3] + "'");
    std::vector<mkmodel::tensor_spec> specs;
    for (const auto& t : r.tensors()) {
      if (t.type != gguf::type_id::f32)
        throw error(std::string(argv[1]) + ": tensor '" + std::string(t.name) + "' is " +
                    std::string(gguf::name_of(t.type)) + ", expected an all-F32 input");
      std::vector<std::uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      const bool norm = t.n_dims < 2 || t.name.find("_norm") != std::string_view::npos;
      specs.push_back({std::string(t.name), ne, norm ? mkmodel::tensor_role::norm : mkmodel::tensor_role::weight,
                       layer_of(t.name)});
    }
    const auto types = mkmodel::assign_types(preset_of(r), specs, *ft, false);

    gguf::writer w;
    for (const auto& [key, value] : r.metadata())
      if (key != "general.alignment") w.set(std::string(key), gguf::owned_value::from(value));
    w.set("general.file_type", std::uint32_t(ft->file_type));
    w.set("general.quantization_version", std::uint32_t(2));
    std::vector<std::vector<std::byte>> data(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto& t = r.tensors()[i];
      const std::span<const float> x(reinterpret_cast<const float*>(t.data.data()), t.n_elements());
      quant::visit(types[i], [&]<class Fmt>(Fmt) { data[i] = quantize_rows<Fmt>(x); });
      w.add_tensor(specs[i].name, types[i], specs[i].ne, std::span<const std::byte>(data[i]));
      std::printf("%-28s %-5s\n", specs[i].name.c_str(), std::string(gguf::name_of(types[i])).c_str());
    }
    w.write(std::filesystem::path(argv[2]));
    std::printf("wrote %s (%s)\n", argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "quantize: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
