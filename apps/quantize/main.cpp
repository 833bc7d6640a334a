// strata-quantize: converts a GGUF model to another file type with llama-quantize's mixes,
// byte-identical to llama-quantize for the same input and options (rt::quantize_model).
// Arguments as llama-quantize takes them: INPUT [OUTPUT] TYPE [THREADS].
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "progress.hpp"
#include "strata/core/error.hpp"
#include "strata/quant/all.hpp"
#include "strata/quant/ftype.hpp"
#include "strata/runtime/quantize.hpp"

namespace {

using namespace strata;

std::string types_text() {
  std::string s = "file types:\n";
  for (const auto& f : quant::ftypes_table) {
    char line[160];
    std::snprintf(line, sizeof line, "  %2u  %-10s %s\n", unsigned(f.id), std::string(f.name).c_str(),
                  std::string(f.summary).c_str());
    s += line;
  }
  return s;
}

gguf::type_id tensor_type_arg(const std::string& s, const char* flag) {
  const auto t = gguf::type_from_name(s);
  if (!t || !quant::is_supported(*t))
    throw error(std::string(flag) + ": '" + s + "' is not a tensor type Strata can write (e.g. q8_0, q6_k, f16)");
  return *t;
}

// INPUT [OUTPUT] TYPE [THREADS]: the second argument is the type when it names one, and the
// output then defaults to ggml-model-TYPE.gguf beside the input (llama-quantize's rule).
void read_positionals(const std::vector<std::string>& pos, rt::quantize_params& p, const char*& type_name) {
  if (pos.size() < 2) throw error("expected INPUT [OUTPUT] TYPE [THREADS] (see --help)");
  p.input = pos[0];
  std::size_t i = 1;
  const quant::ftype_info* ft = quant::find_ftype(pos[1]);
  if (ft) {
    p.output = p.input.parent_path() / ("ggml-model-" + std::string(ft->name) + ".gguf");
    i = 2;
  } else {
    p.output = pos[1];
    if (pos.size() < 3) throw error("missing the file type after " + pos[1] + " (see --list-types)");
    ft = quant::find_ftype(pos[2]);
    if (!ft) throw error("unknown file type '" + pos[2] + "' (see --list-types)");
    i = 3;
  }
  p.ftype = ft->id;
  type_name = ft->name.data();
  if (i < pos.size()) {
    try {
      std::size_t used = 0;
      const int n = std::stoi(pos[i], &used);
      if (used != pos[i].size() || n < 0) throw std::invalid_argument("");
      p.threads = unsigned(n);
    } catch (const std::exception&) {
      throw error("THREADS: '" + pos[i] + "' is not a thread count");
    }
    ++i;
  }
  if (i < pos.size()) throw error("unexpected argument '" + pos[i] + "'");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::app;
  cli c({"strata-quantize",
         "[options] INPUT.gguf [OUTPUT.gguf] TYPE [THREADS]",
         "Quantize a GGUF model (F32, F16, BF16, or an already quantized one with --allow-requantize) to "
         "another file type with llama-quantize's per-tensor mixes; the output is byte-identical to "
         "llama-quantize's for the same input and options. TYPE is a name or number from --list-types; "
         "THREADS defaults to every hardware thread.",
         {{"Q4_K_M from an F16 model", "strata-quantize model-f16.gguf model-q4_k_m.gguf Q4_K_M"},
          {"with an importance matrix from llama-imatrix", "strata-quantize --imatrix imatrix.gguf model-f16.gguf model-iq4_xs.gguf IQ4_XS 8"},
          {"every matrix Q8_0, output.weight kept", "strata-quantize --pure --leave-output-tensor model-f32.gguf model-q8.gguf Q8_0"},
          {"what the Q3_K_M mix would give, without writing", "strata-quantize --dry-run model-f16.gguf Q3_K_M"}}});
  auto& app = c.app();
  rt::quantize_params p;
  std::vector<std::string> positionals;
  std::string output_type, token_embd_type;
  std::vector<std::string> tensor_types;
  bool list_types = false;
  log_options lo;
  app.add_option("args", positionals, "INPUT.gguf [OUTPUT.gguf] TYPE [THREADS]")->group("");
  app.add_flag("--allow-requantize", p.allow_requantize,
               "accept already quantized tensors (dequantized first; quality is lower than from F16/F32)")
      ->group("Quantization");
  app.add_flag("--leave-output-tensor", p.leave_output, "keep output.weight as it is")->group("Quantization");
  app.add_flag("--pure", p.pure, "no mix: every matrix in the file type's base type")->group("Quantization");
  app.add_option("--output-tensor-type", output_type, "type of output.weight (e.g. q8_0)")
      ->type_name("TYPE")->group("Quantization");
  app.add_option("--token-embedding-type", token_embd_type, "type of token_embd.weight")
      ->type_name("TYPE")->group("Quantization");
  app.add_option("--tensor-type", tensor_types,
                 "PATTERN=TYPE: tensors whose name matches the regex PATTERN get TYPE (repeatable; first match wins)")
      ->type_name("PATTERN=TYPE")->allow_extra_args(false)
      ->group("Quantization");
  app.add_flag("--dry-run", p.dry_run, "print the type and size of every tensor, write nothing")->group("Quantization");
  app.add_flag("--list-types", list_types, "list the file types and exit")->group("Quantization");
  app.add_option("--imatrix", p.imatrix_name, "importance matrix (llama-imatrix GGUF, or legacy .dat) for the "
                 "quantizers that weigh errors by it")->type_name("FILE")->group("Importance matrix");
  app.add_option("--include-weights", p.include_weights, "use the imatrix only for tensors whose name contains this (repeatable)")
      ->type_name("NAME")->allow_extra_args(false)
      ->group("Importance matrix");
  app.add_option("--exclude-weights", p.exclude_weights, "do not use the imatrix for tensors whose name contains this (repeatable)")
      ->type_name("NAME")->allow_extra_args(false)
      ->group("Importance matrix");
  c.add_log_options(lo);
  if (const int rc = c.parse(argc, argv); rc >= 0) return rc;
  if (list_types) {
    std::cout << types_text();
    return 0;
  }

  std::unique_ptr<logger> log;
  try {
    log = make_logger(lo);
    const char* type_name = "";
    read_positionals(positionals, p, type_name);
    p.imatrix = p.imatrix_name;
    if (!output_type.empty()) p.output_type = tensor_type_arg(output_type, "--output-tensor-type");
    if (!token_embd_type.empty()) p.token_embd_type = tensor_type_arg(token_embd_type, "--token-embedding-type");
    for (const auto& tt : tensor_types) {
      const auto eq = tt.rfind('=');
      if (eq == std::string::npos || eq == 0) throw error("--tensor-type: expected PATTERN=TYPE, got '" + tt + "'");
      p.tensor_types.emplace_back(tt.substr(0, eq), tensor_type_arg(tt.substr(eq + 1), "--tensor-type"));
    }
    log->info("quantize", (p.dry_run ? "sizes of " : "quantizing ") + p.input.string() +
                              (p.dry_run ? "" : " to " + p.output.string()) + " as " + type_name);

    std::unique_ptr<progress_bar> bar;
    const auto on_tensor = [&](const rt::quantize_tensor_report& r) {
      char line[256];
      std::snprintf(line, sizeof line, "[%3zu/%3zu] %-36s %-18s %6s -> %-6s %9.3f -> %9.3f MiB%s%s%s", r.index,
                    r.count, r.name.c_str(), r.shape.c_str(), std::string(gguf::name_of(r.from)).c_str(),
                    std::string(gguf::name_of(r.to)).c_str(), double(r.bytes_in) / (1 << 20),
                    double(r.bytes_out) / (1 << 20), r.used_imatrix ? " (imatrix)" : "",
                    r.fallback ? " (fallback: row length)" : "", r.note.empty() ? "" : (" (" + r.note + ")").c_str());
      if (p.dry_run) {
        std::cout << line << "\n";
        return;
      }
      log->debug("quantize", line);
      if (!bar) bar = std::make_unique<progress_bar>(*log, "quantize", "quantize", r.count, "tensors");
      bar->update(r.index, r.name);
    };
    const auto s = rt::quantize_model(p, on_tensor);
    if (bar) bar->finish();
    char line[256];
    std::snprintf(line, sizeof line, "model %.2f MiB (%.2f bpw) -> %.2f MiB (%.2f bpw), %zu tensors in %.2f s",
                  double(s.bytes_in) / (1 << 20), 8.0 * double(s.bytes_in) / double(s.n_elements),
                  double(s.bytes_out) / (1 << 20), 8.0 * double(s.bytes_out) / double(s.n_elements), s.n_tensors,
                  s.seconds);
    log->info("quantize", line);
    if (s.imatrix_entries) log->info("quantize", "importance matrix: " + std::to_string(s.imatrix_entries) + " entries");
    if (s.n_fallback)
      log->warn("quantize", std::to_string(s.n_fallback) + " of " + std::to_string(s.n_tensors) +
                                " tensors took a fallback type (row length not a multiple of the mix's block)");
    return 0;
  } catch (const std::exception& e) {
    if (log) log->error("quantize", e.what());
    else std::fprintf(stderr, "strata-quantize: error: %s\n", e.what());
    return 1;
  }
}
