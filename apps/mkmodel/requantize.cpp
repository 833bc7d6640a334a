#include "requantize.hpp"

#include <algorithm>
#include <numeric>

#include "strata/core/error.hpp"
#include "strata/quant/all.hpp"
#include "strata/quant/mix.hpp"

namespace strata::mkmodel {

namespace {

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

requantized requantize(const gguf::reader& in, quant::ftype ft) {
  const auto tensors = in.tensors();
  // The mix counts attn_v/ffn_down in llama-quantize's visiting order; choose in that order.
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return quant::tensor_order_less(tensors[a].name, tensors[b].name); });
  std::vector<quant::mix_tensor> mt;
  for (const std::size_t i : order) mt.push_back({tensors[i].name, tensors[i].ne, tensors[i].type});
  const auto chosen = quant::choose_types(quant::model_shape_of(in), mt, ft);
  std::vector<gguf::type_id> types(tensors.size());
  for (std::size_t k = 0; k < order.size(); ++k) types[order[k]] = chosen[k].type;

  requantized out;
  for (const auto& [key, value] : in.metadata())
    if (key != "general.alignment") out.writer.set(std::string(key), gguf::owned_value::from(value));
  out.writer.set("general.file_type", std::uint32_t(ft));
  out.writer.set("general.quantization_version", std::uint32_t(2));
  out.data.resize(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    out.data[i] = t.type == types[i] ? std::vector<std::byte>(t.data.begin(), t.data.end())
                                     : quantize(dequantize(t), types[i], t.name);
    out.writer.add_tensor(std::string(t.name), types[i], std::vector<std::uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                          std::span<const std::byte>(out.data[i]));
    out.types.emplace_back(std::string(t.name), types[i]);
  }
  return out;
}

}  // namespace strata::mkmodel
