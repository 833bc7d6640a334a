// rt::quantize_model: llama-quantize's pipeline (src/llama-quant.cpp) on Strata's pieces. What
// makes the output byte-identical: the metadata is the input's, in order, with
// general.quantization_version and general.file_type moved to the end (gguf_set_val removes and
// appends) and the split keys dropped; tensors in the loader's order (tensor_order_less) with
// ggml_n_dims dimensions; types from quant::choose_types; data from quant::quantize_rows (ggml's
// quantizers, byte for byte), each expert of a 3-D tensor with its own imatrix slice; 32-byte
// alignment with zero padding (gguf::writer).
#include "strata/runtime/quantize.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <thread>

#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"
#include "strata/quant/imatrix.hpp"
#include "strata/quant/mix.hpp"
#include "strata/quant/quantize_rows.hpp"

namespace strata::rt {
namespace {

// Runs fn(begin, end) over [0, n) split into at most `threads` contiguous ranges.
template <class F>
void parallel_for(std::size_t n, unsigned threads, const F& fn) {
  const std::size_t parts = std::max<std::size_t>(1, std::min<std::size_t>(threads, n));
  if (parts == 1) {
    fn(std::size_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(parts);
  for (std::size_t p = 0; p < parts; ++p)
    pool.emplace_back([&, p] {
      try {
        fn(n * p / parts, n * (p + 1) / parts);
      } catch (...) {
        errors[p] = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::string shape_of(const quant::mix_tensor& t) {
  std::string s = "[";
  for (std::uint32_t d = 0; d < t.n_dims(); ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

// The imatrix as llama-quantize uses it: filtered by --include/--exclude-weights.
struct importance {
  quant::imatrix m;
  bool active = false;
};

importance load_importance(const quantize_params& p) {
  importance imp;
  if (p.imatrix.empty()) return imp;
  if (!p.include_weights.empty() && !p.exclude_weights.empty())
    throw error("--include-weights and --exclude-weights cannot be used together");
  imp.m = quant::load_imatrix(p.imatrix);
  auto& w = imp.m.weights;
  const auto contains_any = [](const std::string& name, const std::vector<std::string>& subs) {
    return std::any_of(subs.begin(), subs.end(), [&](const std::string& s) { return name.find(s) != name.npos; });
  };
  if (!p.exclude_weights.empty()) std::erase_if(w, [&](const auto& e) { return contains_any(e.first, p.exclude_weights); });
  if (!p.include_weights.empty()) std::erase_if(w, [&](const auto& e) { return !contains_any(e.first, p.include_weights); });
  imp.active = !w.empty();
  return imp;
}

void copy_metadata(const gguf::reader& in, gguf::writer& w, const quantize_params& p, const importance& imp) {
  for (const auto& [key, v] : in.metadata()) w.set(std::string(key), gguf::owned_value::from(v));
  const auto set_last = [&](const std::string& key, gguf::owned_value v) {  // gguf_set_val: remove, append
    w.remove(key);
    w.set(key, std::move(v));
  };
  set_last("general.quantization_version", gguf::owned_value::scalar(std::uint32_t(2)));  // GGML_QNT_VERSION
  set_last("general.file_type", gguf::owned_value::scalar(std::uint32_t(p.ftype)));
  for (const char* k : {"split.no", "split.count", "split.tensors.count"}) w.remove(k);
  if (!imp.active) return;
  // tools/quantize writes these as 127-byte strings and u32 counts.
  const auto clip = [](std::string s) { return s.size() > 127 ? s.substr(0, 127) : s; };
  const std::string file = p.imatrix_name.empty() ? p.imatrix.string() : p.imatrix_name;
  set_last("quantize.imatrix.file", gguf::owned_value::string(clip(file)));
  if (!imp.m.datasets.empty()) set_last("quantize.imatrix.dataset", gguf::owned_value::string(clip(imp.m.datasets[0])));
  set_last("quantize.imatrix.entries_count", gguf::owned_value::scalar(std::uint32_t(imp.m.weights.size())));
  if (imp.m.chunk_count > 0)
    set_last("quantize.imatrix.chunks_count", gguf::owned_value::scalar(std::uint32_t(imp.m.chunk_count)));
}

struct planned_tensor {
  const gguf::tensor_info* in;
  quant::mix_tensor mt;
  quant::mix_choice choice;
  const std::vector<float>* importance = nullptr;  // ne0 * ne2 weights, or none
  std::string note;
};

// The float32 values of a tensor: a view of the file for F32, else converted into `buf`.
const float* as_f32(const planned_tensor& t, const quantize_params& p, std::vector<float>& buf, unsigned threads) {
  const auto& in = *t.in;
  if (in.type == gguf::type_id::f32) return reinterpret_cast<const float*>(in.data.data());
  const bool quantized = gguf::block_elems(in.type) > 1;
  if (quantized && !p.allow_requantize)
    throw error(std::string(in.name) + ": requantizing from type " + std::string(gguf::name_of(in.type)) +
                " is disabled (pass --allow-requantize; quality is lower than quantizing from F16/F32)");
  if (!quant::is_supported(in.type))
    throw error(std::string(in.name) + ": cannot convert from tensor type " + std::string(gguf::name_of(in.type)));
  const std::size_t n = std::size_t(in.n_elements());
  buf.resize(n);
  const std::size_t be = gguf::block_elems(in.type), bb = gguf::block_bytes(in.type);
  parallel_for(n / be, threads, [&](std::size_t b0, std::size_t b1) {
    quant::dequantize_rows(in.type, in.data.data() + b0 * bb, (b1 - b0) * be, buf.data() + b0 * be);
  });
  return buf.data();
}

void check_finite(const float* x, const planned_tensor& t, unsigned threads) {
  const std::size_t n = std::size_t(t.in->n_elements());
  std::atomic<std::size_t> first_bad{n};
  parallel_for(n, threads, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i)
      if (!std::isfinite(x[i])) {
        std::size_t cur = first_bad.load();
        while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
        }
        return;
      }
  });
  if (const std::size_t i = first_bad.load(); i < n)
    throw error(std::string(t.in->name) + ": value at element " + std::to_string(i) + " (row " +
                std::to_string(i / t.mt.ne[0]) + ") is not finite; llama-quantize rejects it too");
}

// Converts one tensor into `out` (its new bytes).
void convert(const planned_tensor& t, const quantize_params& p, unsigned threads, std::vector<float>& f32_buf,
             std::vector<std::byte>& out) {
  const float* x = as_f32(t, p, f32_buf, threads);
  check_finite(x, t, threads);
  const auto ty = t.choice.type;
  const std::size_t n_per_row = std::size_t(t.mt.ne[0]);
  const std::size_t rows_per_mat = std::size_t(t.mt.ne[1]);
  const std::size_t n_mat = std::size_t(t.mt.ne[2] * t.mt.ne[3]);
  const std::size_t rb = quant::row_bytes(ty, n_per_row);
  out.resize(rb * rows_per_mat * n_mat);
  for (std::size_t m = 0; m < n_mat; ++m) {  // each expert with its own importance slice
    std::span<const float> imp;
    if (t.importance) imp = std::span<const float>(*t.importance).subspan((m % t.mt.ne[2]) * n_per_row, n_per_row);
    const float* src = x + m * rows_per_mat * n_per_row;
    std::byte* dst = out.data() + m * rows_per_mat * rb;
    parallel_for(rows_per_mat, threads, [&](std::size_t r0, std::size_t r1) {
      quant::quantize_rows(ty, src + r0 * n_per_row, r1 - r0, n_per_row, imp, dst + r0 * rb);
    });
  }
}

}  // namespace

quantize_summary quantize_model(const quantize_params& p,
                                const std::function<void(const quantize_tensor_report&)>& on_tensor) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!quant::name_of(p.ftype).size())
    throw error("file type " + std::to_string(std::uint32_t(p.ftype)) + " is not supported by strata-quantize");
  if (!p.dry_run) {
    std::error_code ec;
    if (std::filesystem::equivalent(p.input, p.output, ec))
      throw error("input and output are the same file: " + p.input.string());
  }
  const unsigned threads = p.threads ? p.threads : std::max(1u, std::thread::hardware_concurrency());
  const auto f = gguf::open(p.input);
  const gguf::reader& in = f.gguf();
  const importance imp = load_importance(p);

  std::vector<std::regex> patterns;
  for (const auto& [pat, ty] : p.tensor_types) {
    try {
      patterns.emplace_back(pat);
    } catch (const std::regex_error& e) {
      throw error("--tensor-type: bad pattern '" + pat + "': " + e.what());
    }
  }
  quant::mix_options mo;
  mo.pure = p.pure;
  mo.has_imatrix = imp.active;
  mo.quantize_output = !p.leave_output;
  mo.output_type = p.output_type;
  mo.token_embd_type = p.token_embd_type;
  if (!patterns.empty())
    mo.override_type = [&](std::string_view name) -> std::optional<gguf::type_id> {
      const std::string n(name);
      for (std::size_t i = 0; i < patterns.size(); ++i)
        if (std::regex_search(n, patterns[i])) return p.tensor_types[i].second;
      return std::nullopt;
    };

  // The loader's order and ggml's view of each tensor.
  std::vector<const gguf::tensor_info*> order;
  for (const auto& t : in.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return quant::tensor_order_less(a->name, b->name); });
  std::vector<quant::mix_tensor> mts;
  for (const auto* t : order) mts.push_back({t->name, t->ne, t->type});
  const auto choices = quant::choose_types(quant::model_shape_of(in), mts, p.ftype, mo);

  std::vector<planned_tensor> plan;
  quantize_summary sum;
  for (std::size_t i = 0; i < order.size(); ++i) {
    planned_tensor t{order[i], mts[i], choices[i], nullptr, {}};
    const std::string name(t.in->name);
    if (t.choice.type != t.in->type) {
      if (!quant::is_supported(t.choice.type))
        throw error(name + ": no quantizer for type " + std::string(gguf::name_of(t.choice.type)));
      if (imp.active) {
        const auto it = imp.m.weights.find(name);
        const std::size_t want = std::size_t(t.mt.ne[0] * t.mt.ne[2]);
        if (it == imp.m.weights.end()) t.note = "no imatrix entry";
        else if (it->second.size() == want) t.importance = &it->second;
        else if (name != "token_embd.weight" && name != "per_layer_token_embd.weight")
          throw error(name + ": imatrix has " + std::to_string(it->second.size()) + " values for it, the tensor needs " +
                      std::to_string(want) + " (ne0 x experts): was it computed on another model?");
        else t.note = "imatrix size mismatch (ignored for the embeddings)";
      }
      if (!t.importance && quant::requires_imatrix(name, t.choice.type, p.ftype))
        throw error(name + ": " + std::string(gguf::name_of(t.choice.type)) + " in a " +
                    std::string(quant::name_of(p.ftype)) + " file needs an importance matrix (--imatrix)");
    }
    sum.n_fallback += t.choice.fallback;
    sum.n_elements += t.in->n_elements();
    plan.push_back(std::move(t));
  }
  sum.n_tensors = plan.size();
  sum.imatrix_entries = imp.active ? imp.m.weights.size() : 0;

  gguf::writer w;
  copy_metadata(in, w, p, imp);
  std::vector<std::byte> current;  // the tensor being written (fills come in order)
  std::vector<float> f32_buf;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& t = plan[i];
    const auto out_bytes = std::uint64_t(quant::row_bytes(t.choice.type, std::size_t(t.mt.ne[0]))) *
                           (t.in->n_elements() / t.mt.ne[0]);
    sum.bytes_in += t.in->nbytes;
    sum.bytes_out += out_bytes;
    quantize_tensor_report rep{i + 1, plan.size(), std::string(t.in->name), shape_of(t.mt), t.in->type,
                               t.choice.type, t.in->nbytes, out_bytes, t.choice.type != t.in->type,
                               t.choice.fallback, t.importance != nullptr, t.note};
    if (p.dry_run) {
      if (on_tensor) on_tensor(rep);
      continue;
    }
    std::vector<std::uint64_t> ne(t.mt.ne.begin(), t.mt.ne.begin() + t.mt.n_dims());
    w.add_tensor(rep.name, t.choice.type, ne, [&, i, rep](std::uint64_t off, std::span<std::byte> chunk) {
      const auto& pt = plan[i];
      if (!rep.converted) {
        std::memcpy(chunk.data(), pt.in->data.data() + off, chunk.size());
      } else {
        if (off == 0) convert(pt, p, threads, f32_buf, current);
        std::memcpy(chunk.data(), current.data() + off, chunk.size());
      }
      if (off + chunk.size() == rep.bytes_out && on_tensor) on_tensor(rep);
    });
  }
  if (!p.dry_run) w.write(p.output);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace strata::rt
