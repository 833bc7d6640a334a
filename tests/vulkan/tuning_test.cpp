// runtime/vulkan/tuning.cpp: the STRATA_VK_* switches. A malformed value stops the backend with an
// error naming the switch and what it must be, never a silent default; a well-formed one is taken.
#include <doctest/doctest.h>

#include <deque>
#include <initializer_list>
#include <utility>

#include "../../runtime/vulkan/tuning.hpp"
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
                        bad_case{"STRATA_VK_MMVQ_QOUT", "128:2:1", "STRATA_VK_MMVQ_QOUT: a QUANT_OUT or NORM_OUT workgroup owns 32 rows"},
                        bad_case{"STRATA_VK_MMVQ_NOUT", "512:1:1", "STRATA_VK_MMVQ_NOUT: a QUANT_OUT or NORM_OUT workgroup owns 32 rows"},
                        bad_case{"STRATA_VK_MMVQ_STACK_SHAPE", "100:2:2", "STRATA_VK_MMVQ_STACK_SHAPE must be WG:RPG:U"},
                        bad_case{"STRATA_VK_MMVQ_MT_QOUT", "64:4:1", "STRATA_VK_MMVQ_MT_QOUT: a QUANT_OUT or NORM_OUT workgroup owns 32 rows"},
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
                        bad_case{"STRATA_VK_DEC_KC", "3", "STRATA_VK_DEC_KC='3' must be one of 1, 2, 4, 8, 16 (keys a chunk"},
                        bad_case{"STRATA_VK_QDEC_KC", "0", "STRATA_VK_QDEC_KC='0' must be one of 1, 2, 4, 8, 16 (keys a chunk"},
                        bad_case{"STRATA_VK_FA_FASTMASK", "on", "STRATA_VK_FA_FASTMASK='on' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_RING_SPLIT", "yes", "STRATA_VK_QDEC_RING_SPLIT='yes' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_HOIST", "3", "STRATA_VK_QDEC_HOIST='3' must be one of 0, 1, 2"},
                        bad_case{"STRATA_VK_QDEC_KIF", "3", "STRATA_VK_QDEC_KIF='3' must be one of 1, 2, 4, 8, 16"},
                        bad_case{"STRATA_VK_QDEC_WG", "100", "STRATA_VK_QDEC_WG='100' must be one of 64, 128, 256, 512, 1024"},
                        bad_case{"STRATA_VK_QDEC_KVEC", "on", "STRATA_VK_QDEC_KVEC='on' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_BLK_AHEAD", "2", "STRATA_VK_QDEC_BLK_AHEAD='2' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_WARP", "yes", "STRATA_VK_QDEC_WARP='yes' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_VAHEAD", "-1", "STRATA_VK_QDEC_VAHEAD='-1' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_VROW", "2", "STRATA_VK_QDEC_VROW='2' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_ONE_PASS", "on", "STRATA_VK_QDEC_ONE_PASS='on' must be 0 or 1"},
                        bad_case{"STRATA_VK_COMBINE_WG", "64", "STRATA_VK_COMBINE_WG='64' must be one of 128, 256, 512, 1024"},
                        bad_case{"STRATA_VK_COMBINE_CIF", "32", "STRATA_VK_COMBINE_CIF='32' must be one of 4, 8, 16"},
                        bad_case{"STRATA_VK_QDEC_SKIP", "4096", "STRATA_VK_QDEC_SKIP='4096' must be a bit mask from 0 to 4095"},
                        bad_case{"STRATA_VK_QDEC_SKIP", "4a", "STRATA_VK_QDEC_SKIP='4a' must be a bit mask"},
                        // 0 / 1 switches: exactly one character, 0 or 1.
                        bad_case{"STRATA_VK_FUSE", "yes", "STRATA_VK_FUSE='yes' must be 0 or 1"},
                        bad_case{"STRATA_VK_QDEC_LANES", "3", "STRATA_VK_QDEC_LANES='3' must be an integer from 0 to 2"},
                        bad_case{"STRATA_VK_TQ_WAVE", "8193", "STRATA_VK_TQ_WAVE='8193' must be an integer from 0 to 8192"},
                        bad_case{"STRATA_VK_MMA2", "", "STRATA_VK_MMA2='' must be 0 or 1"},
                        bad_case{"STRATA_VK_COOPMAT", "false", "STRATA_VK_COOPMAT='false' must be 0 or 1"},
                        bad_case{"STRATA_VK_QTILE_ATTN", "on", "STRATA_VK_QTILE_ATTN='on' must be 0 or 1"},
                        bad_case{"STRATA_VK_MMVQ_UNROLL", "01", "STRATA_VK_MMVQ_UNROLL='01' must be 0 or 1"},
                        bad_case{"STRATA_VK_MMR_XA", "", "STRATA_VK_MMR_XA='' must be 0 or 1"},
                        bad_case{"STRATA_VK_MM3_AHEAD", "2", "STRATA_VK_MM3_AHEAD='2' must be 0 (one scratch slot) or 1"},
                        // Integers in a range: decimal digits only, nothing clamped.
                        bad_case{"STRATA_VK_PAD_LEVELS", "abc", "STRATA_VK_PAD_LEVELS='abc' must be an integer from 0 to 64"},
                        bad_case{"STRATA_VK_TOPK_LAB", "2", "STRATA_VK_TOPK_LAB='2' must be an integer from 0 to 1"},
                        bad_case{"STRATA_VK_PAD_LEVELS", "65", "STRATA_VK_PAD_LEVELS='65' must be an integer from 0 to 64"},
                        bad_case{"STRATA_VK_MULTI_GQA_MIN", "12x", "STRATA_VK_MULTI_GQA_MIN='12x' must be an integer from 2"},
                        bad_case{"STRATA_VK_MULTI_GQA_MIN", "1", "STRATA_VK_MULTI_GQA_MIN='1' must be an integer from 2 to 4096"},
                        bad_case{"STRATA_VK_MULTI_GQA_MIN", "4097", "STRATA_VK_MULTI_GQA_MIN='4097' must be an integer from 2"},
                        bad_case{"STRATA_VK_MV_NR", "-1", "STRATA_VK_MV_NR='-1' must be an integer from 1 to 16"},
                        bad_case{"STRATA_VK_MV_NR", "+4", "STRATA_VK_MV_NR='+4' must be an integer from 1 to 16"},
                        bad_case{"STRATA_VK_MV_NR", " 4", "STRATA_VK_MV_NR=' 4' must be an integer from 1 to 16"},
                        bad_case{"STRATA_VK_MV_WG", "8", "STRATA_VK_MV_WG='8' must be an integer from 16 to 512"},
                        bad_case{"STRATA_VK_TAIL", "", "STRATA_VK_TAIL='' must be an integer from 0 to 8"},
                        bad_case{"STRATA_VK_TQ_GQA", "3", "STRATA_VK_TQ_GQA='3' must be an integer from 0 to 2"},
                        bad_case{"STRATA_VK_MMQ", "-0", "STRATA_VK_MMQ='-0' must be an integer from 0 to 2"},
                        bad_case{"STRATA_VK_MMS_H2", "4", "STRATA_VK_MMS_H2='4' must be an integer from 0 to 3"},
                        bad_case{"STRATA_VK_SHORT_CTX", "99999999999999999999999",
                                 "STRATA_VK_SHORT_CTX='99999999999999999999999' must be an integer from 0 to 1048576"},
                        bad_case{"STRATA_VK_MMVQ_MAX_TOKENS", "15", "STRATA_VK_MMVQ_MAX_TOKENS='15' must be an integer from 16"},
                        bad_case{"STRATA_VK_SPLITK_WGS", "0", "STRATA_VK_SPLITK_WGS='0' must be an integer from 1 to 65535"},
                        bad_case{"STRATA_VK_MMS_MAX", "0x40", "STRATA_VK_MMS_MAX='0x40' must be an integer from 1 to 4096"},
                        // Integers whose value is then rounded or mapped.
                        bad_case{"STRATA_VK_TQ_SPLIT", "32", "'32' must be an integer from 64 to 8192 (keys"},
                        bad_case{"STRATA_VK_TQ_SPLIT", "9000", "STRATA_VK_TQ_SPLIT='9000' must be an integer from 64 to 8192"},
                        bad_case{"STRATA_VK_DEC_LANES_WG", "2048", "STRATA_VK_DEC_LANES_WG='2048' must be an integer from 32"},
                        bad_case{"STRATA_VK_SPLITK_MIN_K", "0", "STRATA_VK_SPLITK_MIN_K='0' must be an integer from 1 to 65536"},
                        bad_case{"STRATA_VK_MM3_SCRATCH_MIN", "-5", "STRATA_VK_MM3_SCRATCH_MIN='-5' must be an integer from 0"},
                        bad_case{"STRATA_VK_MM3_SCRATCH_MIN", "-5", "(tokens; 0: never)"},
                        bad_case{"STRATA_VK_MMK_SMALL", "off", "STRATA_VK_MMK_SMALL='off' must be an integer from 0"},
                        bad_case{"STRATA_VK_MMQ_DENSE", "8", "'8' must be 0 (off), 1 (on) or a token count from 16 to 64"},
                        bad_case{"STRATA_VK_MMQ_DENSE", "65", "STRATA_VK_MMQ_DENSE='65' must be 0 (off), 1 (on)"},
                        bad_case{"STRATA_VK_MMQ_DENSE_MAX_K", "32", "STRATA_VK_MMQ_DENSE_MAX_K='32' must be an integer"},
                        bad_case{"STRATA_VK_MMR_MAX", "0x10", "STRATA_VK_MMR_MAX='0x10' must be a token count of 1-64"},
                        // Enumerated values.
                        bad_case{"STRATA_VK_MMS_MOE_CHUNK", "48", "STRATA_VK_MMS_MOE_CHUNK='48' must be one of 16, 32"},
                        bad_case{"STRATA_VK_MMQ_MOE_CHUNK", "16 ", "STRATA_VK_MMQ_MOE_CHUNK='16 ' must be one of 16"}}) {
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
  // Well-formed values at the ends of their ranges are taken.
  using good_case = std::pair<const char*, const char*>;
  for (const auto& [name, good] :
       {good_case{"STRATA_VK_FUSE", "1"}, {"STRATA_VK_COOPMAT", "1"}, {"STRATA_VK_PAD_LEVELS", "0"},
        {"STRATA_VK_MULTI_GQA_MIN", "4096"}, {"STRATA_VK_TQ_SPLIT", "64"}, {"STRATA_VK_TQ_SPLIT", "8192"},
        {"STRATA_VK_MM3_SCRATCH_MIN", "0"}, {"STRATA_VK_MMQ_DENSE", "16"}, {"STRATA_VK_SHORT_CTX", "1048576"},
        {"STRATA_VK_MMS_MOE_CHUNK", "64"}, {"STRATA_VK_MMR_WARPS", "16"}, {"STRATA_VK_MV_NR", "007"}}) {
    CAPTURE(name);
    CAPTURE(good);
    const test::scoped_env env(name, good);
    CHECK_NOTHROW(gpu::backend{});
  }
}

// What a well-formed value of a switch that used to clamp or compare sets: the meaning of each
// value in range is what it was (read_env on its own, no device).
TEST_CASE("vulkan tuning switches: well-formed values keep their meaning") {
  const auto read = [](std::initializer_list<std::pair<const char*, const char*>> env, bool coopmat = true) {
    std::deque<test::scoped_env> set;
    for (const auto& [name, value] : env) set.emplace_back(name, value);
    gpu::backend_tuning t;
    t.coopmat = coopmat;
    t.read_env();
    return t;
  };
  CHECK(read({{"STRATA_VK_FUSE", "1"}}).fuse);
  CHECK(!read({{"STRATA_VK_FUSE", "0"}}).fuse);
  CHECK(read({{"STRATA_VK_QTILE_ATTN", "1"}}).tiled_attention);
  CHECK(!read({{"STRATA_VK_QTILE_ATTN", "0"}}).tiled_attention);
  CHECK(read({{"STRATA_VK_QDEC_LANES", "0"}}).qdec_lanes == 0);
  CHECK(read({{"STRATA_VK_QDEC_LANES", "1"}}).qdec_lanes == 1);
  CHECK(read({{"STRATA_VK_TQ_WAVE", "200"}}).tq_wave_split == 192);  // rounded down to keys of 64
  CHECK(read({{"STRATA_VK_TQ_WAVE", "0"}}).tq_wave_split == 0);
  CHECK(read({{"STRATA_VK_MMA_DEC", "1"}}).mma_dec);
  CHECK(!read({{"STRATA_VK_CHUNK_SLOTS", "0"}}).chunk_slots);
  CHECK(read({{"STRATA_VK_DEC_KC", "4"}}).dec_chunk_keys == 4);
  CHECK(read({{"STRATA_VK_DEC_KC", "4"}}).qdec_chunk_keys == read({}).qdec_chunk_keys);  // each its own switch
  CHECK(read({{"STRATA_VK_QDEC_KC", "1"}}).qdec_chunk_keys == 1);
  CHECK(!read({{"STRATA_VK_MOE_BLOCK_TAIL", "0"}}).moe_block_tail);
  CHECK(!read({{"STRATA_VK_MMR", "0"}}).mmr);
  // COOPMAT only turns the tensor cores off: 1 leaves what the device supports.
  CHECK(!read({{"STRATA_VK_COOPMAT", "1"}}, false).coopmat);
  CHECK(read({{"STRATA_VK_COOPMAT", "1"}}, true).coopmat);
  CHECK(!read({{"STRATA_VK_COOPMAT", "0"}}, true).coopmat);
  CHECK(read({{"STRATA_VK_TQ_GQA", "2"}}).tq_gqa == 2);
  CHECK(read({{"STRATA_VK_TQ_SPLIT", "64"}}).tq_split == 64);
  CHECK(read({{"STRATA_VK_TQ_SPLIT", "200"}}).tq_split == 192);  // rounded down to keys of 64
  CHECK(read({{"STRATA_VK_TQ_SPLIT", "8192"}}).tq_split == 8192);
  CHECK(read({{"STRATA_VK_DEC_LANES_WG", "1000"}}).dec_lanes_wg == 512);  // a power of two
  CHECK(read({{"STRATA_VK_SPLITK_MIN_K", "65"}}).split_min_k == 128);     // a multiple of 64
  CHECK(read({{"STRATA_VK_MULTI_GQA_MIN", "0009"}}).multi_gqa_min == 9);
  CHECK(read({{"STRATA_VK_MMVQ_MAX_TOKENS", "256"}}).mmvq_max_tokens == 256);
  CHECK(read({{"STRATA_VK_MM3_SCRATCH_MIN", "0"}}).mm3_scratch_min == 0xFFFFFFFFu);  // never
  CHECK(read({{"STRATA_VK_MM3_SCRATCH_MIN", "16"}}).mm3_scratch_min == 16);
  CHECK(read({{"STRATA_VK_MM3_AHEAD", "0"}}).mm3_scratch_min == 1024);
  CHECK(read({{"STRATA_VK_MM3_AHEAD", "0"}, {"STRATA_VK_MM3_SCRATCH_MIN", "16"}}).mm3_scratch_min == 16);
  CHECK(read({{"STRATA_VK_MMK_SMALL", "0"}}).mmk_small_min == 0xFFFFFFFFu);  // never
  CHECK(read({{"STRATA_VK_MMK_SMALL", "1"}}).mmk_small_min == 33);           // the default
  CHECK(read({{"STRATA_VK_MMK_SMALL", "48"}}).mmk_small_min == 48);
  {
    const auto off = read({{"STRATA_VK_MMQ_DENSE", "0"}}), on = read({{"STRATA_VK_MMQ_DENSE", "1"}}),
               from = read({{"STRATA_VK_MMQ_DENSE", "32"}});
    CHECK(!off.mmq_dense);
    CHECK((on.mmq_dense && on.mmq_dense_min == 16));
    CHECK((from.mmq_dense && from.mmq_dense_min == 32));
  }
  CHECK(read({{"STRATA_VK_MMQ_DENSE_MAX_K", "4096"}}).mmq_dense_max_k == 4096);
  CHECK(read({{"STRATA_VK_MMS_MOE_CHUNK", "16"}}).mms_moe_chunk == 16);
  CHECK(read({{"STRATA_VK_MMQ_MOE_CHUNK", "64"}}).mmq_moe_chunk == 64);
  CHECK(read({{"STRATA_VK_MMR_XA", "0"}}).mmr_xa == 0);
  CHECK(read({{"STRATA_VK_QDEC_SKIP", "12"}}).qdec_skip == "12");
  CHECK(read({{"STRATA_VK_SWIGLU_PART_KB", "64"}}).swiglu_part_bytes == 64u << 10);
}

// attention_qdec's form and splits by the cache's size: LANES up to qdec_lanes_ctx tokens, and there
// the one-wave splits where the step's workgroups fit two a multiprocessor (no device).
TEST_CASE("vulkan tuning: compressed-KV decode takes LANES and one-wave splits by the cache's size") {
  gpu::backend_tuning t;
  CHECK(t.qdec_lanes_over(4096, 1));
  CHECK(!t.qdec_lanes_over(4096, 2));  // steps of several tokens keep thread-a-key
  CHECK(t.qdec_lanes_over(t.qdec_lanes_ctx, 1));
  CHECK(!t.qdec_lanes_over(t.qdec_lanes_ctx + 1, 1));
  // qwen3-8b (8 KV heads) with the window's split (127 code splits) on the H200's 132 multiprocessors:
  // 22 splits of 192 keys (+1) fit 264 workgroups at 4K, 26 of 320 at 8K (33 of 256 do not); at 16K
  // not even 320-key splits do, nor does a 2-token step at 8K.
  CHECK(t.qdec_min_split(4160, 8, 1, 127, 132) == 192);
  CHECK(t.qdec_min_split(8256, 8, 1, 127, 132) == 320);
  CHECK(t.qdec_min_split(4160, 8, 1, 128, 132) == 192);  // no window split: 22 splits of 192
  CHECK(t.qdec_min_split(1024, 8, 1, 127, 132) == 192);
  CHECK(t.qdec_min_split(16448, 8, 1, 127, 132) == t.tq_split);
  CHECK(t.qdec_min_split(8256, 8, 2, 127, 132) == t.tq_split);
  CHECK(t.qdec_min_split(4160, 8, 1, 127, 0) == t.tq_split);   // no multiprocessor count: no wave to fit
  CHECK(t.qdec_min_split(32768, 8, 1, 127, 132) == t.tq_split);  // thread-a-key there
  t.qdec_lanes = 0;
  CHECK(!t.qdec_lanes_over(4096, 1));
  CHECK(t.qdec_min_split(4160, 8, 1, 127, 132) == t.tq_split);
  t.qdec_lanes = 1;
  CHECK(t.qdec_lanes_over(1u << 20, 8));
  t.tq_wave_split = 448;  // above tq_wave_max: that one length only
  CHECK(t.qdec_min_split(12352, 8, 1, 127, 132) == 448);
  CHECK(t.qdec_min_split(16448, 8, 1, 127, 132) == t.tq_split);
  t.tq_wave_split = 0;
  CHECK(t.qdec_min_split(4160, 8, 1, 127, 132) == t.tq_split);
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
