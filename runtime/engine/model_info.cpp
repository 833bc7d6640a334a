// Model inspection: summary of a GGUF for `strata-run --info` (text table or JSON).
#include "strata/runtime/model_info.hpp"

#include <boost/json.hpp>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "strata/core/utf8.hpp"
#include "strata/gguf/keys.hpp"

namespace strata::rt {
namespace {

namespace json = boost::json;
using gguf::value;
using gguf::value_type;

// Shortest text that reads back to the same value (1e-06, not 9.99999997e-07).
template <class F>
std::string format_number(F d) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, res.ptr);
}

std::string scalar_text(const value& v) {
  switch (v.type()) {
    case value_type::boolean: return v.as<bool>() ? "true" : "false";
    case value_type::f32: return format_number(v.as<float>());
    case value_type::f64: return format_number(v.as<double>());
    case value_type::u64: return std::to_string(v.as<std::uint64_t>());
    case value_type::string: return std::string(v.as_string());
    default: return std::to_string(v.as_int());
  }
}

std::string quoted(std::string_view s, std::size_t max_len) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char c : s) {
    if (n++ == max_len) {
      out += "...";
      break;
    }
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else if (static_cast<unsigned char>(c) < 32) out += '?';
    else out += c;
  }
  return out + "\"";
}

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

json::value scalar_json(const value& v) {
  switch (v.type()) {
    case value_type::boolean: return v.as<bool>();
    // A float prints as its shortest decimal form (1e-05), not as the widened double.
    case value_type::f32: return std::stod(format_number(v.as<float>()));
    case value_type::f64: return v.as<double>();
    case value_type::u64: return v.as<std::uint64_t>();
    case value_type::string: return json::string(utf8::sanitize(v.as_string()));
    default: return v.as_int();
  }
}

value element_value(const value& arr, std::size_t i) {
  const auto sz = gguf::scalar_size(arr.elem_type());
  return value::scalar(arr.elem_type(), arr.raw_array_bytes().data() + i * sz);
}

// Arrays longer than `max_items` become {"type": "array", "elem_type", "length", "head": [...]}.
json::value value_json(const value& v, std::size_t max_items) {
  if (!v.is_array()) return scalar_json(v);
  const std::size_t n = v.size();
  const std::size_t shown = std::min(n, max_items);
  json::array items;
  for (std::size_t i = 0; i < shown; ++i) {
    if (v.elem_type() == value_type::string) items.emplace_back(json::string(utf8::sanitize(v.strings()[i])));
    else if (v.elem_type() == value_type::array) items.emplace_back(value_json(v.arrays()[i], max_items));
    else items.emplace_back(scalar_json(element_value(v, i)));
  }
  if (shown == n) return items;
  json::object o;
  o["type"] = "array";
  o["elem_type"] = std::string(gguf::name_of(v.elem_type()));
  o["length"] = n;
  o["head"] = std::move(items);
  return o;
}

}  // namespace

std::string render_value(const value& v, std::size_t max_items) {
  if (v.is_string()) return quoted(v.as_string(), 60);
  if (!v.is_array()) return scalar_text(v);
  const std::size_t n = v.size();
  if (n > max_items) {
    std::string out = "array of " + std::to_string(n) + " " + std::string(gguf::name_of(v.elem_type())) + " [";
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 3); ++i) {
      if (i) out += ", ";
      if (v.elem_type() == value_type::string) out += quoted(v.strings()[i], 20);
      else if (v.elem_type() == value_type::array) out += render_value(v.arrays()[i], 3);
      else out += scalar_text(element_value(v, i));
    }
    return out + ", ...]";
  }
  std::string out = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    if (v.elem_type() == value_type::string) out += quoted(v.strings()[i], 40);
    else if (v.elem_type() == value_type::array) out += render_value(v.arrays()[i], max_items);
    else out += scalar_text(element_value(v, i));
  }
  return out + "]";
}

model_summary summarize(const gguf::reader& r) {
  model_summary s;
  s.path = r.source();
  s.file_size = r.file_size();
  s.gguf_version = r.version();
  s.alignment = r.alignment();
  s.data_offset = r.data_offset();
  if (auto a = r.find_string(gguf::keys::architecture)) s.architecture = *a;
  if (auto n = r.find(gguf::keys::name); n && n->is_string()) s.name = n->as_string();

  const std::string prefix = s.architecture + ".";
  for (const auto& [key, v] : r.metadata())
    if (!s.architecture.empty() && key.starts_with(prefix))
      s.hparams.emplace_back(std::string(key.substr(prefix.size())), render_value(v));

  auto& t = s.tokenizer;
  if (const value* m = r.find(gguf::keys::tok_model); m && m->is_string()) {
    t.present = true;
    t.model = m->as_string();
  }
  if (const value* p = r.find(gguf::keys::tok_pre); p && p->is_string()) t.pre = p->as_string();
  if (const value* tok = r.find(gguf::keys::tok_tokens); tok && tok->is_array()) t.vocab_size = tok->size();
  if (const value* mg = r.find(gguf::keys::tok_merges); mg && mg->is_array()) t.merges = mg->size();
  const std::pair<const char*, std::string_view> ids[] = {
      {"bos", gguf::keys::tok_bos_id}, {"eos", gguf::keys::tok_eos_id}, {"eot", gguf::keys::tok_eot_id},
      {"unk", gguf::keys::tok_unk_id}, {"pad", gguf::keys::tok_pad_id}};
  for (const auto& [label, key] : ids)
    if (const value* v = r.find(key); v && v->is_integer()) t.special_ids[label] = v->as_int();
  const std::pair<const char*, std::string_view> flags[] = {{"add_bos_token", gguf::keys::tok_add_bos},
                                                            {"add_eos_token", gguf::keys::tok_add_eos},
                                                            {"add_space_prefix", gguf::keys::tok_add_space_prefix}};
  for (const auto& [label, key] : flags)
    if (const value* v = r.find(key); v && v->type() == value_type::boolean) t.flags[label] = v->as<bool>();
  if (const value* ct = r.find(gguf::keys::chat_template); ct && ct->is_string()) {
    s.has_chat_template = true;
    s.chat_template_bytes = ct->as_string().size();
  }

  for (const auto& ti : r.tensors()) {
    tensor_row row{std::string(ti.name), std::string(gguf::name_of(ti.type)),
                   std::vector<std::uint64_t>(ti.ne.begin(), ti.ne.begin() + ti.n_dims), ti.nbytes, ti.file_offset};
    auto& tot = s.by_type[row.type];
    ++tot.tensors;
    tot.bytes += ti.nbytes;
    tot.elements += ti.n_elements();
    s.tensor_bytes += ti.nbytes;
    s.parameters += ti.n_elements();
    s.tensors.push_back(std::move(row));
  }
  return s;
}

std::string render_text(const model_summary& s) {
  std::ostringstream o;
  o << "file:           " << s.path << " (" << s.file_size << " bytes, " << human_bytes(s.file_size) << ")\n";
  o << "format:         GGUF v" << s.gguf_version << ", alignment " << s.alignment << ", tensor data at byte "
    << s.data_offset << "\n";
  o << "architecture:   " << (s.architecture.empty() ? "(missing general.architecture)" : s.architecture) << "\n";
  if (!s.name.empty()) o << "name:           " << s.name << "\n";
  if (!s.hparams.empty()) {
    o << "hyper-parameters:\n";
    for (const auto& [k, v] : s.hparams) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "  %-40s %s\n", k.c_str(), v.c_str());
      o << buf;
    }
  }
  const auto& t = s.tokenizer;
  if (t.present) {
    o << "tokenizer:      " << t.model;
    if (!t.pre.empty()) o << " (pre " << t.pre << ")";
    o << ", " << t.vocab_size << " tokens";
    if (t.merges) o << ", " << t.merges << " merges";
    o << "\n";
    if (!t.special_ids.empty()) {
      o << "special ids:   ";
      for (const auto& [k, v] : t.special_ids) o << " " << k << "=" << v;
      o << "\n";
    }
    if (!t.flags.empty()) {
      o << "tokenizer flags:";
      for (const auto& [k, v] : t.flags) o << " " << k << "=" << (v ? "true" : "false");
      o << "\n";
    }
  } else {
    o << "tokenizer:      (none)\n";
  }
  o << "chat template:  "
    << (s.has_chat_template ? "present (" + std::to_string(s.chat_template_bytes) + " bytes)" : std::string("absent"))
    << "\n";

  std::size_t name_w = 4;
  for (const auto& row : s.tensors) name_w = std::max(name_w, row.name.size());
  char buf[512];
  o << "tensors:\n";
  std::snprintf(buf, sizeof buf, "  %-*s %-8s %-24s %14s %14s\n", int(name_w), "name", "type", "shape", "bytes",
                "offset");
  o << buf;
  for (const auto& row : s.tensors) {
    std::string shape = "[";
    for (std::size_t i = 0; i < row.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(row.shape[i]);
    shape += "]";
    std::snprintf(buf, sizeof buf, "  %-*s %-8s %-24s %14" PRIu64 " %14" PRIu64 "\n", int(name_w), row.name.c_str(),
                  row.type.c_str(), shape.c_str(), row.bytes, row.offset);
    o << buf;
  }
  o << "totals by type:\n";
  for (const auto& [type, tot] : s.by_type) {
    std::snprintf(buf, sizeof buf, "  %-8s %6" PRIu64 " tensors %16" PRIu64 " elements %14" PRIu64 " bytes (%s)\n",
                  type.c_str(), tot.tensors, tot.elements, tot.bytes, human_bytes(tot.bytes).c_str());
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "total:          %zu tensors, %" PRIu64 " parameters, %" PRIu64
                " bytes of tensor data (%s); header %" PRIu64 " bytes; file %" PRIu64 " bytes\n",
                s.tensors.size(), s.parameters, s.tensor_bytes, human_bytes(s.tensor_bytes).c_str(), s.data_offset,
                s.file_size);
  o << buf;
  return o.str();
}

std::string render_json(const model_summary& s, const gguf::reader& r) {
  json::object root;
  root["architecture"] = utf8::sanitize(s.architecture);
  root["file"] = {{"path", utf8::sanitize(s.path)},
                  {"size", s.file_size},
                  {"gguf_version", s.gguf_version},
                  {"alignment", s.alignment},
                  {"data_offset", s.data_offset}};
  json::object meta;
  for (const auto& [key, v] : r.metadata()) meta[utf8::sanitize(key)] = value_json(v, 64);
  root["metadata"] = std::move(meta);
  json::array tensors;
  for (const auto& row : s.tensors) {
    // names come from the file: keep the JSON valid even for invalid UTF-8
    json::array shape;
    for (auto d : row.shape) shape.emplace_back(d);
    tensors.emplace_back(json::object{{"name", utf8::sanitize(row.name)},
                                      {"type", row.type},
                                      {"shape", std::move(shape)},
                                      {"bytes", row.bytes},
                                      {"offset", row.offset}});
  }
  root["tensors"] = std::move(tensors);
  json::object by_type;
  for (const auto& [type, tot] : s.by_type)
    by_type[type] = {{"tensors", tot.tensors}, {"bytes", tot.bytes}, {"elements", tot.elements}};
  root["totals"] = {{"tensors", s.tensors.size()},
                    {"bytes", s.tensor_bytes},
                    {"parameters", s.parameters},
                    {"by_type", std::move(by_type)}};
  return json::serialize(root);
}

}  // namespace strata::rt
