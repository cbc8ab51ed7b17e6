/* Causal grouped-query attention over a KV cache [S, Hkv, D] of float32
 * (attention, attention_part) or float16 (the _f16 kernels).
 * q [T, Hq, D]; query t sits at position start + t and sees keys 0..start+t.
 * attention: one work-group per (head, token): keys in chunks of the
 * work-group size, one score per item, online softmax; the output row
 * accumulates in local memory (item d owns dimensions d, d + lsz, ...).
 *
 * attention_part: split-key attention for long contexts (flash-decoding):
 * work-group (head h, query t, split s) covers keys [s * span, (s + 1) * span)
 * of the n = start + t + 1 visible ones and writes its unnormalized partial
 * output po [T, Hq, S, D] with its running max and sum pml [T, Hq, S, 2];
 * attention_merge combines the S partials of each (t, h). */
#define DEFINE_ATTENTION(NAME, PART, CT, ATTEND)                                            \
  kernel void NAME(global const float* restrict q, global const CT* restrict kc,            \
                   global const CT* restrict vc, global float* restrict out, const int Hq,  \
                   const int Hkv, const int D, const int start, const float scale,          \
                   local float* qv, local float* ov, local float* pv, local float* scratch) { \
    const int h = get_group_id(0);                                                         \
    const int t = get_group_id(1);                                                         \
    const int lid = get_local_id(0), lsz = get_local_size(0);                              \
    const float2 ml = ATTEND(q + ((size_t)t * Hq + h) * D, kc, vc, h / (Hq / Hkv), Hkv, D, \
                             0, start + t + 1, scale, qv, ov, pv, scratch);                \
    global float* orow = out + ((size_t)t * Hq + h) * D;                                   \
    for (int d = lid; d < D; d += lsz) orow[d] = ov[d] / ml.y;                             \
  }                                                                                        \
                                                                                           \
  kernel void PART(global const float* restrict q, global const CT* restrict kc,            \
                   global const CT* restrict vc, global float* restrict po,                 \
                   global float2* restrict pml, const int Hq, const int Hkv, const int D,   \
                   const int start, const float scale, const int span, local float* qv,     \
                   local float* ov, local float* pv, local float* scratch) {                \
    const int h = get_group_id(0);                                                         \
    const int t = get_group_id(1);                                                         \
    const int s = get_group_id(2);                                                         \
    const int lid = get_local_id(0), lsz = get_local_size(0);                              \
    const int k0 = s * span;                                                               \
    const size_t part = ((size_t)t * Hq + h) * get_num_groups(2) + s;                      \
    const float2 ml = ATTEND(q + ((size_t)t * Hq + h) * D, kc, vc, h / (Hq / Hkv), Hkv, D, \
                             k0, min(start + t + 1, k0 + span), scale, qv, ov, pv, scratch); \
    for (int d = lid; d < D; d += lsz) po[part * D + d] = ov[d];                           \
    if (lid == 0) pml[part] = ml; /* an empty split: (-inf, 0) */                          \
  }

DEFINE_ATTENTION(attention, attention_part, float, attend_keys_f32)
DEFINE_ATTENTION(attention_f16, attention_part_f16, half, attend_keys_f16)

kernel void attention_merge(global const float* restrict po, global const float2* restrict pml,
                            global float* restrict out, const int Hq, const int D,
                            const int S) {
  const int h = get_group_id(0);
  const int t = get_group_id(1);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const size_t base = ((size_t)t * Hq + h) * S;
  const float2 ml = merge_max_sum(pml + base, S);
  for (int d = lid; d < D; d += lsz)
    out[((size_t)t * Hq + h) * D + d] = merge_value(po + base * D, pml + base, S, D, d, ml);
}
