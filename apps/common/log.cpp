#include "log.hpp"

#include <chrono>
#include <cstdlib>
#include <ctime>

#include "strata/core/error.hpp"
#include "strata/json/write.hpp"

namespace strata::app {
namespace {

// Local time with milliseconds: 2025-06-01T12:00:00.123
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03d", int(ms));
  return buf;
}

void value_text(std::string& out, const log_field& f, bool json) {
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string_view>) {
          if (json) json::quote(out, v);
          else out += v;
        } else if constexpr (std::is_same_v<V, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<V, double>) {
          char b[32];
          std::snprintf(b, sizeof b, "%.3f", v);
          out += b;
        } else {
          out += std::to_string(v);
        }
      },
      f.value);
}

}  // namespace

std::optional<log_level> parse_log_level(std::string_view s) noexcept {
  if (s == "error" || s == "0") return log_level::error;
  if (s == "warn" || s == "warning" || s == "1") return log_level::warn;
  if (s == "info" || s == "2") return log_level::info;
  if (s == "debug" || s == "3") return log_level::debug;
  return std::nullopt;
}

std::string_view name_of(log_level l) noexcept {
  switch (l) {
    case log_level::error: return "error";
    case log_level::warn: return "warn";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "info";
}

void logger::log(log_level l, std::string_view component, std::string_view msg,
                 std::initializer_list<log_field> fields) const {
  if (!enabled(l)) return;
  std::string line;
  line.reserve(96 + msg.size());
  if (format_ == log_format::json) {
    line += "{\"ts\":";
    json::quote(line, timestamp());
    line += ",\"level\":";
    json::quote(line, name_of(l));
    line += ",\"component\":";
    json::quote(line, component);
    if (!msg.empty()) {
      line += ",\"msg\":";
      json::quote(line, msg);
    }
    for (const auto& f : fields) {
      line += ',';
      json::quote(line, f.key);
      line += ':';
      value_text(line, f, true);
    }
    line += "}\n";
  } else {
    static constexpr const char* tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    line += timestamp();
    line += ' ';
    line += tags[int(l)];
    line += " [";
    line += component;
    line += "]";
    if (!msg.empty()) line += ' ';
    line += msg;
    for (const auto& f : fields) {
      line += ' ';
      line += f.key;
      line += '=';
      value_text(line, f, false);
    }
    line += '\n';
  }
  const std::lock_guard lock(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

log_level resolve_log_level(const std::string& flag) {
  if (!flag.empty())
    if (const auto l = parse_log_level(flag)) return *l;
  if (const char* env = std::getenv("STRATA_LOG"); env && *env) {
    if (const auto l = parse_log_level(env)) return *l;
    throw error(std::string("STRATA_LOG='") + env + "' is not a log level (error, warn, info, debug)");
  }
  return log_level::info;
}

}  // namespace strata::app
