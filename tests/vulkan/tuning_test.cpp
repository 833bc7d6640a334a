// runtime/vulkan/tuning.cpp: the STRATA_VK_* switches. A malformed value stops the backend with an
// error naming the switch and what it must be, never a silent default; a well-formed one is taken.
#include <doctest/doctest.h>

#include "strata/core/error.hpp"
#include "support/scoped_env.hpp"
#include "vulkan/vk_harness.hpp"

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN
TEST_CASE("vulkan tuning switches: malformed shapes are refused, naming the switch") {
  if (!vkt::available()) return;
  struct bad_case {
    const char *name, *value, *why;
  };
  for (const auto& c : {bad_case{"STRATA_VK_MMVQ_QOUT", "256:4", "STRATA_VK_MMVQ_QOUT must be WG:RPG:U"},
                        bad_case{"STRATA_VK_MMVQ_QOUT", "256:4:1x", "STRATA_VK_MMVQ_QOUT must be WG:RPG:U"},
                        bad_case{"STRATA_VK_MMVQ_QOUT", "100:4:1", "STRATA_VK_MMVQ_QOUT must be WG:RPG:U"},
                        bad_case{"STRATA_VK_MMVQ_QOUT", "128:2:1", "STRATA_VK_MMVQ_QOUT: a QUANT_OUT workgroup owns 32 rows"},
                        bad_case{"STRATA_VK_MMVQ_MT_QOUT", "64:4:1", "STRATA_VK_MMVQ_MT_QOUT: a QUANT_OUT workgroup owns 32 rows"},
                        bad_case{"STRATA_VK_MMVQ_MT_SHAPE", "64:9:1", "STRATA_VK_MMVQ_MT_SHAPE must be WG:RPG:U"},
                        bad_case{"STRATA_VK_MM3_SHAPE", "128:128:32:64:1", "STRATA_VK_MM3_SHAPE must be BM:BN:WM:WN"},
                        bad_case{"STRATA_VK_MMQ_MOE_SHAPE", "128:32:16 ", "STRATA_VK_MMQ_MOE_SHAPE must be BM:WM:WN"},
                        bad_case{"STRATA_VK_MMR_WARPS", "12", "mul_mm_reg runs 2, 4, 8 or 16 warps"},
                        bad_case{"STRATA_VK_MMR_WARPS", "8x", "mul_mm_reg runs 2, 4, 8 or 16 warps"},
                        bad_case{"STRATA_VK_MMR_XA", "2", "must be 0 or 1"},
                        bad_case{"STRATA_VK_MM_FUSE", "on", "STRATA_VK_MM_FUSE='on' must be 0 (off), 1"},
                        bad_case{"STRATA_VK_MM_FUSE", "3", "STRATA_VK_MM_FUSE='3' must be 0 (off), 1"},
                        bad_case{"STRATA_VK_MMR_MAX", "65", "STRATA_VK_MMR_MAX='65' must be a token count of 1-64"},
                        bad_case{"STRATA_VK_MMR_MAX", "all", "STRATA_VK_MMR_MAX='all' must be a token count of 1-64"},
                        bad_case{"STRATA_VK_STEP_GRANULE", "0", "STRATA_VK_STEP_GRANULE='0' must be a token count from 1"},
                        bad_case{"STRATA_VK_STEP_GRANULE", "64x", "STRATA_VK_STEP_GRANULE='64x' must be a token count"},
                        bad_case{"STRATA_VK_SWIGLU_PART_KB", "16M", "STRATA_VK_SWIGLU_PART_KB='16M' must be a size in KiB"},
                        bad_case{"STRATA_VK_SWIGLU_PART_KB", "-1", "STRATA_VK_SWIGLU_PART_KB='-1' must be a size in KiB"},
                        bad_case{"STRATA_VK_MM3_TOKFAST", "3", "STRATA_VK_MM3_TOKFAST='3' must be 0 (rows fastest)"},
                        bad_case{"STRATA_VK_MM3_AHEAD", "yes", "STRATA_VK_MM3_AHEAD='yes' must be 0 (one scratch slot) or 1"},
                        bad_case{"STRATA_VK_SCRATCH_SLOT_KB", "0", "STRATA_VK_SCRATCH_SLOT_KB='0' must be a size in KiB"},
                        bad_case{"STRATA_VK_SCRATCH_SLOT_KB", "64k", "STRATA_VK_SCRATCH_SLOT_KB='64k' must be a size in KiB"},
                        bad_case{"STRATA_VK_FA_WARPS", "6", "STRATA_VK_FA_WARPS='6' must be one of 4, 8"},
                        bad_case{"STRATA_VK_FA_KEYS", "16", "STRATA_VK_FA_KEYS='16' must be one of 32, 64"},
                        bad_case{"STRATA_VK_FA_FASTMASK", "on", "STRATA_VK_FA_FASTMASK='on' must be one of 0, 1"},
                        bad_case{"STRATA_VK_QDEC_RING_SPLIT", "yes", "STRATA_VK_QDEC_RING_SPLIT='yes' must be one of 0, 1"},
                        bad_case{"STRATA_VK_QDEC_KIF", "3", "STRATA_VK_QDEC_KIF='3' must be one of 1, 2, 4, 8, 16"},
                        bad_case{"STRATA_VK_QDEC_SKIP", "512", "STRATA_VK_QDEC_SKIP='512' must be a bit mask from 0 to 511"},
                        bad_case{"STRATA_VK_QDEC_SKIP", "4a", "STRATA_VK_QDEC_SKIP='4a' must be a bit mask"}}) {
    CAPTURE(c.name);
    CAPTURE(c.value);
    const test::scoped_env env(c.name, c.value);
    CHECK_THROWS_WITH_AS(gpu::backend{}, doctest::Contains(c.why), strata::error);
  }
  for (const char* good : {"512:2:1", "1024:1:1", "256:4:1"}) {
    CAPTURE(good);
    const test::scoped_env env("STRATA_VK_MMVQ_QOUT", good);
    CHECK_NOTHROW(gpu::backend{});
  }
}

// The granule the scheduler fits steps that decode to: the prefill GEMM's token tile (128 with
// tensor cores, mul_mm's 64 without), or what STRATA_VK_STEP_GRANULE says (1: unfitted).
TEST_CASE("vulkan tuning switches: the step granule") {
  if (!vkt::available()) return;
  {
    const gpu::backend be;
    CHECK((be.step_granule() == 64 || be.step_granule() == 128));
  }
  for (const auto& [value, granule] : {std::pair{"1", 1u}, std::pair{"96", 96u}}) {
    const test::scoped_env env("STRATA_VK_STEP_GRANULE", value);
    CHECK(gpu::backend{}.step_granule() == granule);
  }
}
#endif
