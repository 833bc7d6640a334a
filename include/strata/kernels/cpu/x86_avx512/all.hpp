// Every AVX-512 kernel specialization (for isa::avx512 and isa::avx512_vnni); included only
// by runtime/cpu/avx512_table.cpp and avx512_vnni_table.cpp, built with AVX-512 flags. The
// activation quantizers are not repeated here: the AVX2 ones already keep up (a few µs per
// token) and the table merge hands them to these tiers.
#pragma once
#include "strata/kernels/cpu/x86_avx512/bf16.hpp"
#include "strata/kernels/cpu/x86_avx512/f16.hpp"
#include "strata/kernels/cpu/x86_avx512/f32.hpp"
#include "strata/kernels/cpu/x86_avx512/iq4_nl.hpp"
#include "strata/kernels/cpu/x86_avx512/iq4_xs.hpp"
#include "strata/kernels/cpu/x86_avx512/mxfp4.hpp"
#include "strata/kernels/cpu/x86_avx512/q2_k.hpp"
#include "strata/kernels/cpu/x86_avx512/q3_k.hpp"
#include "strata/kernels/cpu/x86_avx512/q4_0.hpp"
#include "strata/kernels/cpu/x86_avx512/q4_1.hpp"
#include "strata/kernels/cpu/x86_avx512/q4_k.hpp"
#include "strata/kernels/cpu/x86_avx512/q5_0.hpp"
#include "strata/kernels/cpu/x86_avx512/q5_1.hpp"
#include "strata/kernels/cpu/x86_avx512/q5_k.hpp"
#include "strata/kernels/cpu/x86_avx512/q6_k.hpp"
#include "strata/kernels/cpu/x86_avx512/q8_0.hpp"
#include "strata/kernels/cpu/x86_avx512/q8_1.hpp"
