// Scale searches of ggml's K-quant and legacy quantizers (ggml-quants.c: make_qx_quants,
// make_q3_quants, make_qkx2_quants for the reference quantizers; make_qkx2_quants as
// make_qkx3_quants with squared error, make_qp_quants and weighted make_qx_quants for the
// importance-weighted ones, quantize_*_impl with an imatrix).
// Quantized bytes must match ggml_quantize_chunk, so every float expression keeps ggml's
// operand order: (w*x)*l is not w*(x*l) in binary32, and one flipped L changes the bytes.
#pragma once
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/quant/detail/rounding.hpp"

namespace strata::quant::detail {

// ggml's GROUP_MAX_EPS: a group whose largest |x| is below this quantizes to all zeros.
inline constexpr float group_max_eps = 1e-15f;

#include "strata/quant/detail/fp_exact_push.hpp"

// Symmetric search: x ≈ scale·(L − nmax) with L in [0, 2·nmax), weights w = qw if given, else
// x² (ggml's rmse_type 1). Starts at scale = max/(−nmax), takes the least-squares scale for
// those codes, then retries 18 nearby inverse scales −(nmax + 0.1·is)/max, is ∈ [−9, 9] \ {0},
// keeping the codes whose weighted fit sumlx²/suml2 is largest. Returns the scale.
inline float make_qx_quants(std::span<const float> x, int nmax, std::span<std::int8_t> L,
                            std::span<const float> qw = {}) noexcept {
  const std::size_t n = x.size();
  assert(L.size() >= n && (qw.empty() || qw.size() >= n));
  const auto weight = [&](std::size_t i) { return qw.empty() ? x[i] * x[i] : qw[i]; };
  float max = 0.0f, amax = 0.0f;  // max keeps its sign: the scale is negative when max > 0
  for (std::size_t i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < group_max_eps) {
    std::fill_n(L.begin(), n, std::int8_t{0});
    return 0.0f;
  }
  const auto code = [nmax](float v) { return std::clamp(nearest_int(v), -nmax, nmax - 1); };
  float iscale = float(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const int l = code(iscale * x[i]);
    L[i] = std::int8_t(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;  // = sumlx²/suml2, the weighted energy this fit explains
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const int l = code(iscale * x[i]);
      const float w = weight(i);
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    // Compare sumlx²/suml2 > best without dividing (ggml's form, kept for identical ties).
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (std::size_t i = 0; i < n; ++i) L[i] = std::int8_t(nmax + code(iscale * x[i]));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's symmetric search (ggml make_q3_quants with do_rmse): codes l ∈ [−nmax, nmax) from
// the scale max/(−nmax), then up to 5 sweeps of coordinate descent. Each sweep moves one
// code at a time to the value the least-squares scale of the *other* codes prefers, and
// keeps the move only if the weighted fit sumlx²/suml2 (w = x²) improves. Stores L + nmax.
inline float make_q3_quants(std::span<const float> x, int nmax, std::span<std::int8_t> L) noexcept {
  const std::size_t n = x.size();
  assert(L.size() >= n);
  float max = 0.0f, amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < group_max_eps) {
    std::fill_n(L.begin(), n, std::int8_t{0});  // ggml leaves 0, not nmax, for an empty group
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = std::int8_t(l);  // signed while searching
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = float(L[i]);
      float slx = sumlx - w * x[i] * li;  // sums without element i
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        // Best code for x[i] under the scale slx/sl2 of the remaining elements.
        const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          // Accept iff slx²/sl2 > sumlx²/suml2, cross-multiplied as ggml does.
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = std::int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (std::size_t i = 0; i < n; ++i) L[i] = std::int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric search (ggml make_qkx2_quants): x ≈ scale·L − the_min with L ∈ [0, nmax] and
// the_min ≥ 0 (a non-positive offset is all these formats can store). Starts from the
// range [min(x, 0), max(x)], then for nstep+1 inverse scales (nmax + rmin + rdelta·is)/range
// fits scale and offset by weighted least squares on the rounded codes, keeping the pair
// with the smallest weighted error (|diff| when use_mad, else diff²). Returns the scale and
// writes the_min. n ≤ 32.
struct qkx2_params {
  int nmax;       // largest code
  float rmin;     // first inverse-scale offset tried
  float rdelta;   // step between tries
  int nstep;      // tries are is = 0..nstep
  bool use_mad;   // error metric: mean absolute (true) or squared (false) deviation
};

inline float make_qkx2_quants(std::span<const float> x, std::span<const float> weights,
                              std::span<std::uint8_t> L, float& the_min, const qkx2_params& p) noexcept {
  const std::size_t n = x.size();
  assert(n >= 1 && n <= 32 && weights.size() >= n && L.size() >= n);
  const int nmax = p.nmax;
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (std::size_t i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill_n(L.begin(), n, std::uint8_t{0});
    the_min = -min;
    return 0.0f;
  }
  const auto code = [nmax](float v) { return std::clamp(nearest_int(v), 0, nmax); };
  const auto err = [&p](float diff) { return p.use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = float(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    L[i] = std::uint8_t(code(iscale * (x[i] - min)));
    best_error += weights[i] * err(scale * float(L[i]) + min - x[i]);
  }
  if (p.nstep < 1) {
    the_min = -min;
    return scale;
  }
  std::array<std::uint8_t, 32> Laux{};
  for (int is = 0; is <= p.nstep; ++is) {
    iscale = (p.rmin + p.rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const int l = code(iscale * (x[i] - min));
      Laux[i] = std::uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    // Normal equations of min_{s,m} Σ w (s·l + m − x)²; D is their determinant.
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.0f) {  // offset must stay ≤ 0: refit the scale alone through 0
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (std::size_t i = 0; i < n; ++i)
        cur_error += weights[i] * err(this_scale * float(Laux[i]) + this_min - x[i]);
      if (cur_error < best_error) {
        std::copy_n(Laux.begin(), n, L.begin());
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  the_min = -min;
  return scale;
}

// Σ x² in ggml's summation order (a plain left-to-right float sum).
inline float sum_squares(std::span<const float> x) noexcept {
  float s = 0.0f;
  for (const float v : x) s += v * v;
  return s;
}

// The per-element weights of ggml's imatrix quantizers: w = qw·√(σ² + x²), where qw is the
// column's importance and σ² a mean square of the surrounding values (its span differs by format).
inline void importance_weights(std::span<const float> x, std::span<const float> qw, float sigma2,
                               std::span<float> w) noexcept {
  for (std::size_t i = 0; i < x.size(); ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

// The legacy formats' weighted quantizers (Q4_0, Q4_1, Q5_0, Q5_1) share their outer loop: σ² is
// the mean square of the whole row, and each block of N gets fn(ib, x_block, weights).
template <std::size_t N, class F>
void for_each_weighted_block(std::span<const float> x, std::span<const float> qw, F&& fn) {
  const float sigma2 = sum_squares(x) / float(x.size());
  for (std::size_t ib = 0; ib < x.size() / N; ++ib) {
    const auto xb = x.subspan(ib * N, N);
    std::array<float, N> w;
    importance_weights(xb, qw.subspan(ib * N, N), sigma2, w);
    fn(ib, xb, std::span<const float>(w));
  }
}

// Quantizes the non-negative sub-block scales (or mins) x of a super-block to L ∈ [0, nmax]
// with one shared scale (ggml make_qp_quants), weighting each by qw (the sub-block's summed
// importance): the best of 9 inverse scales (nmax + 0.1·is)/max by weighted squared error,
// then up to 5 sweeps of coordinate descent on the codes. L wraps like ggml's uint8_t codes
// (a negative input would give a large code), and the fits read the wrapped values.
inline float make_qp_quants(std::span<const float> x, int nmax, std::span<std::uint8_t> L,
                            std::span<const float> qw) noexcept {
  const std::size_t n = x.size();
  assert(L.size() >= n && qw.size() >= n);
  float max = 0.0f;
  for (std::size_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < group_max_eps) {
    std::fill_n(L.begin(), n, std::uint8_t{0});
    return 0.0f;
  }
  float iscale = float(nmax) / max;
  for (std::size_t i = 0; i < n; ++i) L[i] = std::uint8_t(nearest_int(iscale * x[i]));
  const float scale = 1.0f / iscale;
  float best_mse = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float diff = x[i] - scale * float(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
    const float scale_is = 1.0f / iscale_is;
    float mse = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * float(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0.0f, suml2 = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = std::uint8_t(l);
    const float w = qw[i];
    sumlx += w * x[i] * float(l);  // the int code here, the stored (wrapped) one below: as ggml
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float w = qw[i];
      const float li = float(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0.0f && sl2 > 0.0f) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != int(L[i])) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = std::uint8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

#include "strata/quant/detail/fp_exact_pop.hpp"

}  // namespace strata::quant::detail
