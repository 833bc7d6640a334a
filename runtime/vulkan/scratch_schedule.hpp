// The f16 weight scratch of prompt steps (matmul_recording.cpp record_mul_mm_f16) in two slots:
// while a GEMM multiplies the weights one slot holds, the next GEMM's weights are expanded into
// the other, in the same dispatch level, so the expansion (memory-bound) runs under the GEMM
// (bound by its tiles' shared-memory traffic) instead of before it.
//
// Which weights come next is learned from the order the GEMMs are recorded in, by role (a name
// without its block number: "blk.7.ffn_up.weight" has role "ffn_up.weight" in block 7), so block
// 0 teaches blocks 1.. within the same recording. A guess is only a guess: a GEMM uses the slot
// prepared ahead only when it holds exactly its rows, and expands its own otherwise.
#pragma once
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace strata::gpu {

// Rows [r0, r0 + rows) of weight `weight`, expanded to f16; with `up` (a gate/up pair multiplied
// as one SwiGLU GEMM) the same rows of up follow them in the slot.
struct scratch_unit {
  std::uint32_t weight = ~0u, r0 = 0, rows = 0, up = ~0u;
  bool operator==(const scratch_unit&) const = default;
};

class scratch_schedule {
 public:
  // A weight the prompt GEMM may read through the scratch, by its GGUF name.
  void add_weight(std::string_view name, std::uint32_t id) { ids_.emplace(std::string(name), id); }

  // A new step's recording: no slot holds anything the step can rely on (the learned order stays).
  void restart() {
    ahead_.reset();
    last_role_.clear();
    last_block_ = -1;
  }

  // The slot a GEMM of `u` reads, and whether its expansion must be recorded first (into it).
  std::pair<std::uint32_t, bool> take(const scratch_unit& u) {
    if (ahead_ && *ahead_ == u) {
      ahead_.reset();
      ++hits_;
      return {last_slot_, false};
    }
    ahead_.reset();
    return {flip(), true};
  }
  // Records that `u`'s expansion goes into the other slot now: the slot returned.
  std::uint32_t prepare(const scratch_unit& u) {
    ahead_ = u;
    return flip();
  }

  // Notes the weight a GEMM just multiplied (its first rows; `up`: the pair's up weight), teaching
  // the order.
  void multiplied(std::string_view name, std::string_view up = {}) {
    const auto [block, role] = split(name);
    const std::string up_role(up.empty() ? std::string_view{} : split(up).second);
    if (!last_role_.empty())
      next_role_[last_role_] = {std::string(role), block >= 0 && last_block_ >= 0 ? block - last_block_ : 0, up_role};
    last_role_ = std::string(role);
    last_block_ = block;
  }
  // The weight expected after `name` (and its pair's up weight, ~0u if none), from the order
  // learned so far.
  std::optional<std::pair<std::uint32_t, std::uint32_t>> next(std::string_view name) const {
    const auto [block, role] = split(name);
    const auto it = next_role_.find(std::string(role));
    if (it == next_role_.end()) return std::nullopt;
    const auto& [next_role, step, up_role] = it->second;
    const auto id = find(block < 0 ? -1 : block + step, next_role);
    if (!id) return std::nullopt;
    if (up_role.empty()) return std::pair{*id, ~0u};
    const auto up = find(block < 0 ? -1 : block + step, up_role);
    if (!up) return std::nullopt;
    return std::pair{*id, *up};
  }

  // "blk.N.rest" -> (N, "rest"); any other name -> (-1, name).
  static std::pair<int, std::string_view> split(std::string_view name) {
    constexpr std::string_view prefix = "blk.";
    if (!name.starts_with(prefix)) return {-1, name};
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    int block = 0;
    const auto [end, ec] = std::from_chars(first, last, block);
    if (ec != std::errc() || end == last || *end != '.' || block < 0) return {-1, name};
    return {block, name.substr(std::size_t(end + 1 - name.data()))};
  }

  std::uint64_t hits() const { return hits_; }  // GEMMs that found their rows prepared, ever
  std::uint32_t slot(std::uint32_t i) const { return slots_[i]; }
  void set_slots(std::uint32_t a, std::uint32_t b) { slots_[0] = a, slots_[1] = b; }

 private:
  struct successor {
    std::string role;
    int step = 0;
    std::string up_role;  // empty: not a pair
  };
  std::optional<std::uint32_t> find(int block, const std::string& role) const {
    const auto id = ids_.find(block >= 0 ? "blk." + std::to_string(block) + "." + role : role);
    if (id == ids_.end()) return std::nullopt;
    return id->second;
  }
  std::uint32_t flip() {
    last_slot_ = slots_[next_];
    next_ ^= 1u;
    return last_slot_;
  }
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::unordered_map<std::string, successor> next_role_;
  std::string last_role_;
  int last_block_ = -1;
  std::uint32_t slots_[2] = {0, 0}, next_ = 0, last_slot_ = 0;
  std::optional<scratch_unit> ahead_;
  std::uint64_t hits_ = 0;
};

}  // namespace strata::gpu
