// ATTN_F16_OUT (its value is the binding): a decode attention kernel also writes its output as
// f16 into attn_oh, rows of n_head x head_dim halves from 0 (mm_xh as f16_input() lays it out),
// rounded as copy_rows TO_F16 rounds. That is the output projection's tensor-core input, so no
// copy dispatch sits between the two in a 5+-token step.
layout(binding = ATTN_F16_OUT, std430) writeonly buffer AttnOH { float16_t attn_oh[]; };
void attn_f16_out(uint i, float v) { attn_oh[i] = f16_rounded(v); }
