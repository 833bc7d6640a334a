// An output streambuf that writes to a file on a background thread through two large buffers,
// so producing the next bytes (random block generation) overlaps with the disk write of the
// previous ones. Write errors (disk full, I/O error) are kept with their errno text and surface
// as a failed stream plus error_message().
#pragma once
#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::mkmodel {

class async_file_sink : public std::streambuf {
 public:
  explicit async_file_sink(const std::filesystem::path& path, std::size_t buffer_bytes = std::size_t(32) << 20)
      : path_(path), active_(buffer_bytes), pending_(buffer_bytes) {
    f_ = std::fopen(path.string().c_str(), "wb");
    if (!f_) throw error("cannot open '" + path.string() + "' for writing: " + std::strerror(errno));
    std::setvbuf(f_, nullptr, _IONBF, 0);  // our buffers are the buffering
    setp(active_.data(), active_.data() + active_.size());
    worker_ = std::thread([this] { run(); });
  }
  async_file_sink(const async_file_sink&) = delete;
  async_file_sink& operator=(const async_file_sink&) = delete;
  ~async_file_sink() override {
    try {
      close();
    } catch (...) {  // destructor: the caller checks close() when it cares
    }
  }

  // Flushes everything and closes the file; throws with the errno text on failure.
  void close() {
    if (!f_) return;
    submit();
    {
      std::unique_lock lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    worker_.join();
    if (std::fclose(f_) != 0 && failed_.empty()) failed_ = std::strerror(errno);
    f_ = nullptr;
    if (!failed_.empty()) throw error("writing '" + path_.string() + "' failed: " + failed_);
  }

  std::uint64_t bytes_written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::string error_message() const {
    std::unique_lock lock(mu_);
    return failed_;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (!submit()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::streamsize done = 0;
    while (done < n) {
      if (pptr() == epptr() && !submit()) break;
      const auto k = std::min<std::streamsize>(n - done, epptr() - pptr());
      std::memcpy(pptr(), s + done, std::size_t(k));
      pbump(int(k));
      done += k;
    }
    return done;
  }
  int sync() override {
    if (!submit()) return -1;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !has_job_; });
    return failed_.empty() ? 0 : -1;
  }

 private:
  // Hands the filled part of the active buffer to the worker (waiting for it to finish the
  // previous one) and continues in the other buffer. False once a write has failed.
  bool submit() {
    const std::size_t n = std::size_t(pptr() - pbase());
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !has_job_; });
    if (!failed_.empty()) return false;
    if (n == 0) return true;
    std::swap(active_, pending_);
    pending_size_ = n;
    has_job_ = true;
    cv_.notify_all();
    lock.unlock();
    setp(active_.data(), active_.data() + active_.size());
    return true;
  }
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return has_job_ || done_; });
      if (!has_job_) return;
      lock.unlock();
      const std::size_t w = std::fwrite(pending_.data(), 1, pending_size_, f_);
      const int e = errno;
      lock.lock();
      if (w != pending_size_ && failed_.empty()) failed_ = e ? std::strerror(e) : "short write";
      written_.fetch_add(w, std::memory_order_relaxed);
      has_job_ = false;
      cv_.notify_all();
    }
  }

  std::filesystem::path path_;
  std::FILE* f_ = nullptr;
  std::vector<char> active_, pending_;  // producer fills active_, worker writes pending_
  std::size_t pending_size_ = 0;
  bool has_job_ = false, done_ = false;
  std::string failed_;
  std::atomic<std::uint64_t> written_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
};

}  // namespace strata::mkmodel
