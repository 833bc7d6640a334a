// A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE) in any app prints what a bug report needs,
// the signal, the faulting address and a backtrace of the crashing thread, to stderr, then
// dies of the same signal (exit status and core dumps stay what they would have been).
#pragma once

namespace strata::app {

// Installs the handler once per process (later calls do nothing); the cli constructor calls it.
void install_crash_report();

}  // namespace strata::app
