// The message of the exception f() throws, or "" when it returns: for checking that a bad input
// is refused with the error that names it.
#pragma once
#include <exception>
#include <string>

namespace strata::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace strata::test
