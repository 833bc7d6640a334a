// The scheduler's hook for constrained decoding (a grammar, a JSON schema, a forced tool call):
// a sampling::token_constraint (the allowed next tokens, per token or as a vocabulary bitmask the
// sampler applies on the host; sampling/constraint.hpp) that the scheduler also advances with
// each sampled token. A constraint may be dormant (a tool-call grammar before its trigger text):
// the row is then sampled unconstrained, but every token is still reported to it.
#pragma once
#include "strata/sampling/constraint.hpp"

namespace strata::rt {

class token_constraint : public sampling::token_constraint {
 public:
  // Whether the next token is restricted at all.
  virtual bool active() { return true; }
  // The token that was sampled (always one the constraint allowed while it was active).
  virtual void accept(sampling::token_id token) = 0;
};

}  // namespace strata::rt
