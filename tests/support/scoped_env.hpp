// Sets an environment variable for a scope and restores what was there before (the Vulkan
// backend reads its switches when it is built, so a test builds the backend inside the scope).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace strata::test {

struct scoped_env {
  // value nullptr: unset for the scope.
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (saved_) ::setenv(name_, saved_->c_str(), 1);
    else ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace strata::test
