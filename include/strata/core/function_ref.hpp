// Non-owning reference to a callable (no allocation), for passing work to the thread pool in
// the per-token hot path where std::function's possible heap allocation is not allowed.
#pragma once
#include <memory>
#include <type_traits>
#include <utility>

namespace strata {

template <class Sig>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept  // NOLINT: implicit by design, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...); }) {}

  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace strata
