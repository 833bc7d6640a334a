// `strata-run --plan` output: the placement per layer group, memory per tier, bytes per token on
// each link and the predicted decode / prefill speed, as text or as one JSON object.
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/core/byte_size.hpp"
#include "strata/json/write.hpp"
#include "strata/tiers/planner.hpp"

namespace strata::tiers {

namespace detail {

inline std::string exec_name(exec_unit e) { return e == exec_unit::gpu ? "gpu" : "cpu"; }

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "attention gpu-resident, routed_experts cpu-computed" for one layer (or the non-layer tensors).
inline std::string layer_signature(const model_demand& d, const placement_plan& p, std::int32_t layer) {
  std::string s;
  std::vector<std::string> seen;
  for (const std::size_t i : p.order) {
    const tensor_demand& t = d.tensors[i];
    if (t.layer != layer || (t.kind == tensor_kind::norm && layer >= 0)) continue;
    const tensor_placement& pl = p.tensors[i];
    std::string item = std::string(kind_name(t.kind)) + " " + std::string(label(pl));
    if (pl.home != home_tier::gpu && pl.prefill != pl.decode) item += " (prefill " + exec_name(pl.prefill) + ")";
    if (p.forced[i]) item += " [-ot " + std::string(forced_name(*p.forced[i])) + "]";
    if (std::find(seen.begin(), seen.end(), item) != seen.end()) continue;
    seen.push_back(item);
    s += (s.empty() ? "" : ", ") + item;
  }
  return s;
}

}  // namespace detail

inline std::string plan_text(const model_demand& d, const placement_plan& p, const plan_options& o) {
  std::string out;
  const auto line = [&](const std::string& s) { out += s + "\n"; };
  line("placement plan: GPU " + format_byte_size(o.gpu_budget) + " for the engine, --ram-budget " +
       format_byte_size(o.ram_budget) + ", prefill batch " + std::to_string(o.prefill_batch));
  line("link speeds: " + o.links.source + (o.links.assumed() ? " - predictions below are ASSUMED, not measured" : ""));
  line("  GPU read " + detail::fmt("%.1f", o.links.gpu_read / 1e9) + " GB/s, host->GPU " +
       detail::fmt("%.1f", o.links.host_to_gpu / 1e9) + " GB/s, CPU read " + detail::fmt("%.1f", o.links.cpu_read / 1e9) +
       " GB/s (side by side: CPU " + detail::fmt("%.2f", o.links.cpu_read_beside_copies) + "x, copies " +
       detail::fmt("%.2f", o.links.copies_beside_cpu_read) + "x), NVMe " + detail::fmt("%.2f", o.links.nvme_qd1 / 1e9) + " (QD1) / " +
       detail::fmt("%.2f", o.links.nvme_qd32 / 1e9) + " (QD32) GB/s; a block's fixed time " +
       detail::fmt("%.0f", o.links.block_s * 1e6) + " us, a hand-off " + detail::fmt("%.0f", o.links.handoff_s * 1e6) +
       " us");
  line("GPU memory: weights " + format_byte_size(p.gpu_weights) + " + KV " + format_byte_size(p.gpu_kv) + " + scratch " +
       format_byte_size(p.gpu_scratch) + " + upload ring " + format_byte_size(p.gpu_ring) + " = " +
       format_byte_size(p.gpu_total()));
  line("RAM: weights " + format_byte_size(p.ram_weights) + " + KV " + format_byte_size(p.ram_kv) + " + scratch " +
       format_byte_size(p.ram_scratch) + " = " + format_byte_size(p.ram_total()) + "; disk: weights " +
       format_byte_size(p.disk_weights));
  // Consecutive layers with the same placement share a line.
  const std::string head = detail::layer_signature(d, p, -1);
  line("  non-layer: " + head);
  std::uint32_t start = 0;
  for (std::uint32_t il = 0; il <= d.n_layer; ++il) {
    if (il < d.n_layer && detail::layer_signature(d, p, std::int32_t(il)) ==
                              detail::layer_signature(d, p, std::int32_t(start)))
      continue;
    if (start < d.n_layer) {
      const std::string range = start + 1 == il ? std::to_string(start)
                                                : std::to_string(start) + "-" + std::to_string(il - 1);
      line("  blk " + range + ": " + detail::layer_signature(d, p, std::int32_t(start)));
    }
    start = il;
  }
  const auto gb = [](double b) { return detail::fmt("%.3f", b / 1e9) + " GB"; };
  const auto row = [&](const std::string& name, double a, double b) {
    line("  " + name + std::string(16 - std::min<std::size_t>(16, name.size()), ' ') + gb(a) + "  |  " + gb(b));
  };
  line("per token            decode (B=1)  |  prefill (B=" + std::to_string(p.prefill.batch) + ")");
  row("GPU read", p.decode.gpu_read_bytes, p.prefill.gpu_read_bytes);
  row("host->GPU", p.decode.host_to_gpu_bytes, p.prefill.host_to_gpu_bytes);
  row("CPU read", p.decode.cpu_read_bytes, p.prefill.cpu_read_bytes);
  row("NVMe read", p.decode.nvme_bytes, p.prefill.nvme_bytes);
  line("  hand-offs/step  " + detail::fmt("%.0f", p.decode.handoffs) + "  |  " + detail::fmt("%.0f", p.prefill.handoffs));
  line(std::string("predicted") + (o.links.assumed() ? " (assumed links)" : "") + ": decode " +
       detail::fmt("%.2f", p.decode.tokens_per_second()) + " t/s, prefill " +
       detail::fmt("%.1f", p.prefill.tokens_per_second()) + " t/s");
  return out;
}

inline std::string plan_json(const model_demand& d, const placement_plan& p, const plan_options& o) {
  std::string s = "{";
  const auto num = [&](std::string_view key, double v, bool comma = true) {
    json::quote(s, key);
    s += ':';  // appended piece by piece: GCC 12 -Wrestrict false positive on ":" + string
    s += detail::fmt("%.17g", v);
    if (comma) s += ',';
  };
  const auto str = [&](std::string_view key, std::string_view v, bool comma = true) {
    json::quote(s, key);
    s += ":";
    json::quote(s, v);
    if (comma) s += ",";
  };
  num("gpu_budget", double(o.gpu_budget));
  num("ram_budget", double(o.ram_budget));
  num("prefill_batch", o.prefill_batch);
  s += "\"links\":{";
  str("source", o.links.source);
  s += std::string("\"assumed\":") + (o.links.assumed() ? "true," : "false,");
  num("gpu_read", o.links.gpu_read);
  num("host_to_gpu", o.links.host_to_gpu);
  num("cpu_read", o.links.cpu_read);
  num("nvme_qd1", o.links.nvme_qd1);
  num("nvme_qd32", o.links.nvme_qd32);
  num("gpu_flops", o.links.gpu_flops);
  num("cpu_flops", o.links.cpu_flops);
  num("handoff_s", o.links.handoff_s);
  num("block_s", o.links.block_s);
  num("cpu_read_beside_copies", o.links.cpu_read_beside_copies);
  num("copies_beside_cpu_read", o.links.copies_beside_cpu_read, false);
  s += "},\"gpu\":{";
  num("weights", double(p.gpu_weights));
  num("kv", double(p.gpu_kv));
  num("scratch", double(p.gpu_scratch));
  num("ring", double(p.gpu_ring));
  num("total", double(p.gpu_total()), false);
  s += "},\"ram\":{";
  num("weights", double(p.ram_weights));
  num("kv", double(p.ram_kv));
  num("scratch", double(p.ram_scratch));
  num("total", double(p.ram_total()), false);
  s += "},";
  num("disk_weights", double(p.disk_weights));
  for (const auto* phase : {&p.decode, &p.prefill}) {
    json::quote(s, phase == &p.decode ? "decode" : "prefill");
    s += ":{";
    num("batch", phase->batch);
    num("tokens_per_second", phase->tokens_per_second());
    num("seconds_per_token", phase->seconds_per_token);
    num("gpu_read_bytes_per_token", phase->gpu_read_bytes);
    num("host_to_gpu_bytes_per_token", phase->host_to_gpu_bytes);
    num("cpu_read_bytes_per_token", phase->cpu_read_bytes);
    num("nvme_bytes_per_token", phase->nvme_bytes);
    num("handoffs_per_step", phase->handoffs, false);
    s += "},";
  }
  s += "\"tensors\":[";
  for (std::size_t k = 0; k < p.order.size(); ++k) {
    const std::size_t i = p.order[k];
    const tensor_demand& t = d.tensors[i];
    const tensor_placement& pl = p.tensors[i];
    s += k ? ",{" : "{";
    str("name", t.name);
    str("kind", kind_name(t.kind));
    num("layer", t.layer);
    num("bytes", double(t.bytes));
    str("placement", label(pl));
    str("decode", detail::exec_name(pl.decode));
    str("prefill", detail::exec_name(pl.prefill));
    if (p.forced[i]) str("override", forced_name(*p.forced[i]));
    s.pop_back();  // the last member's comma
    s += "}";
  }
  s += "]}";
  return s;
}

}  // namespace strata::tiers
