// A counting global allocator for the no-allocation tests. Include it from exactly ONE source file
// of a test binary: it replaces the global operator new/delete for the whole binary (it only
// counts; malloc/free do the work). Every form is replaced, the nothrow ones included
// (std::stable_sort's temporary buffer uses them): forms left to the default allocator would pair
// a default new with this free, which ASan reports as an alloc-dealloc mismatch.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace counting_allocator {
inline std::atomic<long> allocations{0};
}  // namespace counting_allocator

// g++ flags free() of memory from a replaced operator new as mismatched; here they do match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  counting_allocator::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  counting_allocator::allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop
