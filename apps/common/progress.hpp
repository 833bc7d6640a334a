// Progress for the apps: a bar redrawn in place on a terminal (stderr is a TTY), plain log lines
// at 25% steps otherwise (CI logs, files, --log-format json). Nothing shows for a step that ends
// within 300 ms (a warm pipeline cache, a short prompt). progress_sink adapts the
// runtime's progress_event callback (include/strata/core/progress.hpp) to bars, one per stage.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "log.hpp"
#include "strata/core/progress.hpp"

namespace strata::app {

bool stderr_is_tty() noexcept;

class progress_bar {
 public:
  // unit "bytes" prints MiB; anything else prints counts with the unit name.
  progress_bar(const logger& log, std::string component, std::string label, std::uint64_t total,
               std::string unit = {});
  ~progress_bar();
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;

  void update(std::uint64_t done, std::string_view detail = {});  // thread-safe
  void finish(std::string_view detail = {});                      // idempotent

 private:
  std::string amount(std::uint64_t v) const;
  void draw(std::string_view detail);
  const logger& log_;
  std::string component_, label_, unit_;
  std::uint64_t total_, done_ = 0;
  bool tty_, finished_ = false;
  int next_step_ = 25;  // non-TTY: next percentage to report
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_{};
  bool shown_ = false;  // past the initial delay
  std::size_t last_width_ = 0;
};

// A progress_fn for rt::engine_options and friends: opens a bar when a stage starts (and the
// stage is long enough to be worth one), closes it at done == total.
progress_fn progress_sink(const logger& log, std::string component);

}  // namespace strata::app
