#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace strata::app {

bool stderr_is_tty() noexcept { return ::isatty(2) == 1; }

progress_bar::progress_bar(const logger& log, std::string component, std::string label, std::uint64_t total,
                           std::string unit)
    : log_(log), component_(std::move(component)), label_(std::move(label)), unit_(std::move(unit)),
      total_(std::max<std::uint64_t>(total, 1)),
      // A bar only where a person watches stderr, and only for text logs (JSON stays parseable).
      tty_(stderr_is_tty() && log.format() == log_format::text && log.enabled(log_level::info)) {}

progress_bar::~progress_bar() {
  if (!finished_ && tty_ && last_width_) {  // abandoned (an exception): end the line
    const std::lock_guard lock(log_.mutex());
    std::fputc('\n', log_.stream());
  }
}

std::string progress_bar::amount(std::uint64_t v) const {
  char b[48];
  if (unit_ == "bytes") std::snprintf(b, sizeof b, "%.1f MiB", double(v) / (1 << 20));
  else std::snprintf(b, sizeof b, "%llu%s%s", static_cast<unsigned long long>(v), unit_.empty() ? "" : " ",
                     unit_.c_str());
  return b;
}

void progress_bar::draw(std::string_view detail) {
  constexpr int width = 30;
  const int pct = int(100 * done_ / total_);
  const int fill = int(width * done_ / total_);
  std::string line = "\r" + label_ + " [" + std::string(std::size_t(fill), '#') +
                     std::string(std::size_t(width - fill), '.') + "] ";
  char p[8];
  std::snprintf(p, sizeof p, "%3d%% ", pct);
  line += p;
  line += amount(done_) + " / " + amount(total_);
  if (!detail.empty()) line += "  " + std::string(detail);
  const std::size_t visible = line.size() - 1;
  if (visible < last_width_) line += std::string(last_width_ - visible, ' ');  // clear leftovers
  last_width_ = visible;
  const std::lock_guard lock(log_.mutex());
  std::fwrite(line.data(), 1, line.size(), log_.stream());
  std::fflush(log_.stream());
}

void progress_bar::update(std::uint64_t done, std::string_view detail) {
  if (finished_) return;
  done_ = std::min(done, total_);
  if (!shown_) {
    if (std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(300)) return;
    shown_ = true;
  }
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_draw_ = now;
    draw(detail);
    return;
  }
  const int pct = int(100 * done_ / total_);
  if (pct >= next_step_ && done_ < total_) {
    log_.info(component_, label_ + ": " + std::to_string(pct) + "% (" + amount(done_) + " / " + amount(total_) + ")");
    next_step_ = (pct / 25 + 1) * 25;
  }
}

void progress_bar::finish(std::string_view detail) {
  if (finished_) return;
  done_ = total_;
  if (tty_ && shown_) {
    draw(detail);
    const std::lock_guard lock(log_.mutex());
    std::fputc('\n', log_.stream());
  }
  finished_ = true;
}

progress_fn progress_sink(const logger& log, std::string component) {
  struct state {
    std::unique_ptr<progress_bar> bar;
    std::string stage;
  };
  auto st = std::make_shared<state>();
  return [&log, component = std::move(component), st](const progress_event& e) {
    if (!st->bar || st->stage != e.stage) {
      if (st->bar) st->bar->finish();
      st->stage = std::string(e.stage);
      st->bar = std::make_unique<progress_bar>(log, component, std::string(e.stage), e.total, std::string(e.unit));
    }
    st->bar->update(e.done);
    if (e.done >= e.total) {
      st->bar->finish();
      st->bar.reset();
    }
  };
}

}  // namespace strata::app
