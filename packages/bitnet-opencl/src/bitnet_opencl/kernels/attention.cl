/* Causal grouped-query attention over a KV cache [S, Hkv, D] (float32).
 * q [T, Hq, D]; query t sits at position start + t and sees keys 0..start+t.
 * One work-group per (head, token): keys in chunks of the work-group size,
 * one score per item, online softmax; the output row accumulates in local
 * memory (item d owns dimensions d, d + lsz, ...). */
kernel void attention(global const float* restrict q, global const float* restrict kc,
                      global const float* restrict vc, global float* restrict out,
                      const int Hq, const int Hkv, const int D, const int start,
                      const float scale, local float* qv, local float* ov,
                      local float* pv, local float* scratch) {
  const int h = get_group_id(0);
  const int t = get_group_id(1);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const int hk = h / (Hq / Hkv);
  const int n = start + t + 1;
  const float2 ml = attend_keys(q + ((size_t)t * Hq + h) * D, kc, vc, hk, Hkv, D, 0, n, scale,
                                qv, ov, pv, scratch);
  const float l = ml.y;
  global float* orow = out + ((size_t)t * Hq + h) * D;
  for (int d = lid; d < D; d += lsz) orow[d] = ov[d] / l;
}

/* Split-key attention for long contexts (flash-decoding): work-group
 * (head h, query t, split s) covers keys [s * span, (s + 1) * span) of the
 * n = start + t + 1 visible ones and writes its unnormalized partial output
 * po [T, Hq, S, D] with its running max and sum pml [T, Hq, S, 2];
 * attention_merge combines the S partials of each (t, h). */
kernel void attention_part(global const float* restrict q, global const float* restrict kc,
                           global const float* restrict vc, global float* restrict po,
                           global float2* restrict pml, const int Hq, const int Hkv,
                           const int D, const int start, const float scale, const int span,
                           local float* qv, local float* ov, local float* pv,
                           local float* scratch) {
  const int h = get_group_id(0);
  const int t = get_group_id(1);
  const int s = get_group_id(2);
  const int S = get_num_groups(2);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const int hk = h / (Hq / Hkv);
  const int n = start + t + 1;
  const int k0 = s * span;
  const size_t part = ((size_t)t * Hq + h) * S + s;
  const float2 ml = attend_keys(q + ((size_t)t * Hq + h) * D, kc, vc, hk, Hkv, D, k0,
                                min(n, k0 + span), scale, qv, ov, pv, scratch);
  for (int d = lid; d < D; d += lsz) po[part * D + d] = ov[d];
  if (lid == 0) pml[part] = ml; /* an empty split: (-inf, 0) */
}

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
