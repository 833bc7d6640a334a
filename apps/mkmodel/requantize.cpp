#include "requantize.hpp"

#include "strata/core/error.hpp"
#include "strata/quant/all.hpp"

namespace strata::mkmodel {

namespace {

// The preset fields quant_mix reads (layer count, heads, experts), from the file's hyper-parameters.
preset preset_of(const gguf::reader& r) {
  const std::string a(r.get_string("general.architecture"));
  const auto u32 = [&](const char* k, std::uint32_t def) {
    const auto* v = r.find(a + "." + k);
    return v ? std::uint32_t(v->as_uint()) : def;
  };
  preset p{};
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

std::vector<float> dequantize(const gguf::tensor_info& t) {
  std::vector<float> x(t.n_elements());
  quant::visit(t.type, [&]<class Fmt>(Fmt) {
    constexpr std::size_t be = Fmt::block_elems;
    const auto* blocks = reinterpret_cast<const typename Fmt::block*>(t.data.data());
    for (std::size_t i = 0; i * be < x.size(); ++i) Fmt::dequant(blocks[i], std::span<float, be>(x.data() + i * be, be));
  });
  return x;
}

std::vector<std::byte> quantize(const std::vector<float>& x, gguf::type_id type, std::string_view name) {
  std::vector<std::byte> out;
  quant::visit(type, [&]<class Fmt>(Fmt) {
    constexpr std::size_t be = Fmt::block_elems;
    if constexpr (requires(std::span<const float, be> s) { Fmt::quantize(s); }) {
      out.resize(x.size() / be * sizeof(typename Fmt::block));
      auto* blocks = reinterpret_cast<typename Fmt::block*>(out.data());
      for (std::size_t i = 0; i * be < x.size(); ++i)
        blocks[i] = Fmt::quantize(std::span<const float, be>(x.data() + i * be, be));
    } else {
      throw error("tensor '" + std::string(name) + "': no reference quantizer for " + std::string(Fmt::name));
    }
  });
  return out;
}

}  // namespace

requantized requantize(const gguf::reader& in, const ftype_info& ft) {
  std::vector<tensor_spec> specs;
  for (const auto& t : in.tensors()) {
    const bool norm = t.n_dims < 2 || t.name.find("_norm") != std::string_view::npos;
    specs.push_back({std::string(t.name), std::vector<std::uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                     norm ? tensor_role::norm : tensor_role::weight, layer_of(t.name)});
  }
  const auto types = assign_types(preset_of(in), specs, ft, false);
  requantized out;
  for (const auto& [key, value] : in.metadata())
    if (key != "general.alignment") out.writer.set(std::string(key), gguf::owned_value::from(value));
  out.writer.set("general.file_type", std::uint32_t(ft.file_type));
  out.writer.set("general.quantization_version", std::uint32_t(2));
  out.data.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& t = in.tensors()[i];
    out.data[i] = t.type == types[i] ? std::vector<std::byte>(t.data.begin(), t.data.end())
                                     : quantize(dequantize(t), types[i], t.name);
    out.writer.add_tensor(specs[i].name, types[i], specs[i].ne, std::span<const std::byte>(out.data[i]));
    out.types.emplace_back(specs[i].name, types[i]);
  }
  return out;
}

}  // namespace strata::mkmodel
