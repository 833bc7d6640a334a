// The step cache's bookkeeping (step_cache.cpp): whether this step replays a recorded one or
// records, its key and the part being recorded into, where its results are read to, the
// profiling queries' layout, and the counters. A base of backend::impl; plain values only: the
// recorded steps (their command buffers), the query pool and the recorder are impl's, destroyed
// before its device. Private to runtime/vulkan.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "backend.hpp"

namespace strata::gpu {

struct recorded_step;

struct recording_state {
  recorded_step* current = nullptr;  // this step's layers' part (impl's steps), or the one being recorded
  // record_only: backend::record_only; recorded_any: this step recorded a part.
  bool replay = false, recording = false, record_only = false, recorded_any = false;
  std::uint64_t current_key = 0;
  float* read_dst = nullptr;
  std::size_t read_floats = 0;
  std::int32_t* ids_dst = nullptr;  // argmax results' destination (read back from impl's ids_readback)
  std::size_t ids_count = 0;
  std::uint32_t last_dispatches = 0, last_barriers = 0;  // of the last step run (recorded or replayed), both parts
  step_recording_stats recordings;
  std::chrono::steady_clock::time_point record_start;
  std::map<std::string, kernel_time> prof;
  std::uint32_t query_capacity = 0, output_queries = 0;  // impl's query pool: the output part's timestamps from output_queries
};

}  // namespace strata::gpu
