// Scalar CPU reference ops on rows of floats, with ggml's numerics where it matters for
// matching llama.cpp: RMSNorm sums squares in double; RoPE angles are built by repeated
// multiplication in float; SiLU is x / (1 + exp(-x)). Spec: architectures.md §3.1-3.2.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::kernels::cpu {

// y = x / sqrt(mean(x²) + eps) [* w]; y may alias x.
inline void rms_norm_row(const float* x, const float* w, float eps, float* y, std::size_t n) noexcept {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  if (w)
    for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  else
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

inline float silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) noexcept { return 1.0f / (1.0f + std::exp(-x)); }

// cos/sin of every rotary pair for one position (ggml rope_cache_init without YaRN).
// freq_factors (rope_freqs.weight) divide the angle; freq_scale multiplies it.
inline void rope_angles(std::int32_t pos, std::uint32_t n_rot, float base, float freq_scale, const float* freq_factors,
                        float* cos_out, float* sin_out) noexcept {
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  float theta = float(pos);
  for (std::uint32_t i = 0; i < n_rot / 2; ++i) {
    const float ff = freq_factors ? freq_factors[i] : 1.0f;
    const float t = freq_scale * (theta / ff);
    cos_out[i] = std::cos(t);
    sin_out[i] = std::sin(t);
    theta *= theta_scale;
  }
}

// Rotates one head in place: NORM pairs (2i, 2i+1) or NEOX pairs (i, i + n_rot/2).
inline void rope_head(float* x, std::uint32_t n_rot, bool neox, const float* c, const float* s) noexcept {
  const std::uint32_t half = n_rot / 2;
  for (std::uint32_t i = 0; i < half; ++i) {
    float* a = neox ? x + i : x + 2 * i;
    float* b = neox ? x + i + half : x + 2 * i + 1;
    const float x0 = *a, x1 = *b;
    *a = x0 * c[i] - x1 * s[i];
    *b = x0 * s[i] + x1 * c[i];
  }
}

// 1 + scale · ln(floor((pos + 1) / floor_base) + 1): Llama 4's NoPE-layer attention temperature
// (llama.cpp: floor_base 8192, scale 0.1), evaluated in double and stored as a float as
// llama.cpp does; 1.0 below position floor_base − 1.
inline float position_scale(std::int32_t pos, double scale, float floor_base) noexcept {
  return float(std::log(double(std::floor((float(pos) + 1.0f) / floor_base)) + 1.0) * scale + 1.0);
}

}  // namespace strata::kernels::cpu
