#include "crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace strata::app {
namespace {

// Only async-signal-safe calls below: write(), backtrace_symbols_fd(), backtrace() (its first
// call loads libgcc and may allocate, so install_crash_report() makes it once up front).
void put(const char* s) { (void)!write(STDERR_FILENO, s, std::strlen(s)); }

void put_hex(std::uintptr_t v) {
  char buf[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; ++i) buf[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xF];
  buf[18] = 0;
  put(buf);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGILL: return "SIGILL (illegal instruction: a CPU without an instruction this build uses?)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    default: return "fatal signal";
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  put("\nstrata: ");
  put(signal_name(sig));
  put(" at address ");
  put_hex(reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr));
  put("; backtrace of the crashing thread (please include it in a bug report):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND restored the default action: the same signal now ends the process as usual.
  raise(sig);
}

}  // namespace

void install_crash_report() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  void* warm[1];
  (void)backtrace(warm, 1);
  // A stack overflow leaves no stack to run the handler on: give it its own.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(sig, &sa, nullptr);
}

}  // namespace strata::app
