// One log format for every app: "2025-06-01T12:00:00.123 INFO  [component] message" on stderr,
// or one JSON object per line ({"ts","level","component","msg", extra fields}) with
// --log-format json. The level comes from --log-level, else STRATA_LOG, else info. The logger
// is an object the app owns and hands to whatever logs (no global state); lines are written
// whole under a lock, so threads never interleave inside a line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace strata::app {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };
enum class log_format { text, json };

// "error", "warn"/"warning", "info", "debug", or 0..3; nullopt otherwise.
std::optional<log_level> parse_log_level(std::string_view s) noexcept;
std::string_view name_of(log_level l) noexcept;

// A JSON field of a structured log line (numbers stay numbers).
struct log_field {
  std::string_view key;
  std::variant<std::string_view, std::int64_t, double, bool> value;
};

class logger {
 public:
  explicit logger(log_level level = log_level::info, log_format format = log_format::text,
                  std::FILE* out = stderr) noexcept
      : level_(level), format_(format), out_(out) {}
  logger(const logger&) = delete;
  logger& operator=(const logger&) = delete;

  bool enabled(log_level l) const noexcept { return int(l) <= int(level_); }
  log_level level() const noexcept { return level_; }
  log_format format() const noexcept { return format_; }
  std::FILE* stream() const noexcept { return out_; }

  // One line; in JSON, `fields` follow "msg" (in text they are appended as key=value).
  void log(log_level l, std::string_view component, std::string_view msg,
           std::initializer_list<log_field> fields = {}) const;
  void error(std::string_view c, std::string_view m) const { log(log_level::error, c, m); }
  void warn(std::string_view c, std::string_view m) const { log(log_level::warn, c, m); }
  void info(std::string_view c, std::string_view m) const { log(log_level::info, c, m); }
  void debug(std::string_view c, std::string_view m) const { log(log_level::debug, c, m); }

  // Serializes output with log lines (the progress bar redraws through this lock).
  std::mutex& mutex() const noexcept { return mu_; }

 private:
  log_level level_;
  log_format format_;
  std::FILE* out_;
  mutable std::mutex mu_;
};

// The level from --log-level if given, else from STRATA_LOG, else info. A bad STRATA_LOG value
// throws strata::error naming it (a bad --log-level is rejected by the parser).
log_level resolve_log_level(const std::string& flag);

}  // namespace strata::app
