// A member set for the length of a scope and given back its old value however the scope ends
// (an error thrown mid-recording included): the recording switches that steer bind_weight and
// the cache lookup while a GPU share is recorded. Private to runtime/vulkan.
#pragma once
#include <utility>

namespace strata::gpu {

template <class T>
class scoped_value {
 public:
  scoped_value(T& ref, T value) : ref_(ref), old_(std::exchange(ref, std::move(value))) {}
  ~scoped_value() { ref_ = std::move(old_); }
  scoped_value(const scoped_value&) = delete;
  scoped_value& operator=(const scoped_value&) = delete;

 private:
  T& ref_;
  T old_;
};

}  // namespace strata::gpu
