#include "shader_compiler.hpp"

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>
#include <glslang/build_info.h>

#include "strata/runtime/cache_dir.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {
namespace fs = std::filesystem;

std::uint64_t stable_hash(std::string_view s, std::uint64_t h) noexcept {
  for (const unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

fs::path default_cache_dir() { return rt::default_cache_dir(); }

namespace {
std::once_flag glslang_once;
#define STRATA_STR2(x) #x
#define STRATA_STR(x) STRATA_STR2(x)
constexpr const char* glslang_version =
    "glslang " STRATA_STR(GLSLANG_VERSION_MAJOR) "." STRATA_STR(GLSLANG_VERSION_MINOR) "." STRATA_STR(GLSLANG_VERSION_PATCH);

// A line-numbered excerpt of the source around glslang's first error, for the message.
std::string excerpt(const std::string& src, const std::string& log) {
  const auto p = log.find("0:");
  if (p == std::string::npos) return {};
  const int line = std::atoi(log.c_str() + p + 2);
  std::istringstream in(src);
  std::string l, out;
  for (int n = 1; std::getline(in, l); ++n)
    if (n >= line - 2 && n <= line + 2) out += std::to_string(n) + ": " + l + "\n";
  return out;
}
}  // namespace

shader_compiler::shader_compiler(fs::path cache_dir, std::string device_key)
    : dir_(std::move(cache_dir)), device_key_(std::move(device_key)) {
  std::call_once(glslang_once, [] { glslang::InitializeProcess(); });
  if (!dir_.empty()) {
    std::error_code ec;
    fs::create_directories(dir_ / "spirv", ec);
    if (ec) dir_.clear();  // no cache rather than failing: compilation still works
  }
}

shader_compiler::~shader_compiler() = default;

std::vector<std::uint32_t> shader_compiler::compile(const std::string& name, const std::string& source) {
  const std::uint64_t key = stable_hash(device_key_, stable_hash(glslang_version, stable_hash(source)));
  char hexkey[17];
  std::snprintf(hexkey, sizeof hexkey, "%016llx", static_cast<unsigned long long>(key));
  const fs::path file = dir_.empty() ? fs::path() : dir_ / "spirv" / (std::string(hexkey) + ".spv");
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (in) {
      const auto bytes = std::size_t(in.tellg());
      if (bytes >= 20 && bytes % 4 == 0) {
        std::vector<std::uint32_t> words(bytes / 4);
        in.seekg(0);
        if (in.read(reinterpret_cast<char*>(words.data()), std::streamsize(bytes)) && words[0] == 0x07230203u) {
          ++hits_;
          return words;
        }
      }
    }
  }

  glslang::TShader shader(EShLangCompute);
  const char* text = source.c_str();
  shader.setStrings(&text, 1);
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_2);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_5);
  const auto msgs = EShMessages(EShMsgSpvRules | EShMsgVulkanRules);
  if (!shader.parse(GetDefaultResources(), 450, false, msgs))
    throw error("shader '" + name + "' failed to compile:\n" + shader.getInfoLog() + excerpt(source, shader.getInfoLog()));
  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(msgs)) throw error("shader '" + name + "' failed to link:\n" + std::string(program.getInfoLog()));
  std::vector<std::uint32_t> spirv;
  glslang::SpvOptions opt;
  opt.disableOptimizer = false;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &opt);
  ++compiled_;

  if (!file.empty()) {  // write-then-rename so a concurrent reader never sees half a file
    const fs::path tmp = file.string() + ".tmp" + std::to_string(std::hash<std::string>{}(name) ^ key);
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(spirv.data()), std::streamsize(spirv.size() * 4));
    out.close();
    std::error_code ec;
    if (out) fs::rename(tmp, file, ec);
    else fs::remove(tmp, ec);
  }
  return spirv;
}

}  // namespace strata::gpu
