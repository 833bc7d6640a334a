// The candidate array every sampling step works on: {id, logit, p} per token, as llama.cpp's
// llama_token_data_array. A `candidates` is a window over a buffer the sampler preallocated
// (n_vocab entries); steps reorder it and shrink `size`, never allocate.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "strata/core/error.hpp"
#include "strata/sampling/sampler_params.hpp"

namespace strata::sampling {

struct token_data {
  token_id id;  // vocabulary id
  float logit;  // log-odds after the steps applied so far
  float p;      // probability, written by softmax()/top_p()/dist(); scratch otherwise
};

// Invariant: data[0, n_sorted) holds the n_sorted highest logits in non-increasing order and no
// element after it has a higher logit. Steps that only cut a prefix or scale by a positive
// factor keep it; steps that change logits unevenly reset n_sorted to 0.
struct candidates {
  token_data* data = nullptr;
  std::size_t size = 0;
  std::size_t n_sorted = 0;

  std::span<token_data> view() const noexcept { return {data, size}; }
  void truncate(std::size_t n) noexcept {
    size = std::min(size, n);
    n_sorted = std::min(n_sorted, size);
  }
};

namespace detail {
// Total order used whenever we sort: higher logit first, lower id first among equal logits, so
// ties (top_k boundary, greedy) resolve the same way on every platform.
constexpr bool ranks_before(const token_data& a, const token_data& b) noexcept {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
}  // namespace detail

// Full vocabulary in id order from one logits row; `buffer` needs logits.size() entries. NaN
// logits (a broken model row) become -inf so the comparators stay a strict weak order.
inline candidates fill(std::span<token_data> buffer, std::span<const float> logits) {
  if (buffer.size() < logits.size())
    throw error("sampling: candidate buffer of " + std::to_string(buffer.size()) + " entries is smaller than " +
                std::to_string(logits.size()) + " logits");
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    buffer[i] = {static_cast<token_id>(i), std::isnan(l) ? -std::numeric_limits<float>::infinity() : l, 0.0f};
  }
  return {buffer.data(), logits.size(), 0};
}

// Extends the sorted prefix to min(k, size) entries; only the unsorted tail is touched. A small
// extension uses partial_sort, a heap of the m best that most entries leave after one compare
// with its top (~n compares; llama.cpp's top_k does this for k <= 128); a large one uses nth_element
// (O(n), more moves per entry) and sorts just the selected entries.
inline void sort_prefix(candidates& c, std::size_t k) {
  k = std::min(k, c.size);
  if (k <= c.n_sorted) return;
  token_data* first = c.data + c.n_sorted;
  token_data* last = c.data + c.size;
  token_data* mid = c.data + k;
  if (std::size_t(mid - first) * 64 <= std::size_t(last - first)) {
    std::partial_sort(first, mid, last, detail::ranks_before);
  } else {
    if (mid < last) std::nth_element(first, mid - 1, last, detail::ranks_before);
    std::sort(first, mid, detail::ranks_before);
  }
  c.n_sorted = k;
}

// Highest logit (-inf for an empty set or one where every token is banned).
inline float max_logit(const candidates& c) noexcept {
  if (c.n_sorted > 0) return c.data[0].logit;
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < c.size; ++i) m = std::max(m, c.data[i].logit);
  return m;
}

}  // namespace strata::sampling
