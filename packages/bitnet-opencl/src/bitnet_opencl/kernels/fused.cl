/* Fused kernels of the decode step (bitnet_opencl.backend): one token a
 * sequence, ids and positions read from the device buffer `meta` (ids[0..T),
 * then each sequence's position at meta[pos_at]), so a recorded step is the
 * same at every position. `tok`: the sequence's row in a batched step (its
 * token's rows of qkv, q, att, xq, xs); `part0`: the first of its attention
 * partials. Their arithmetic is the unfused kernels' (common.clh helpers). */

/* y = rmsnorm(x, w) then int8 (xq [T, K], xs [T]); one work-group a row. */
kernel void rmsnorm_quant(global const float* restrict x, global const float* restrict w,
                          global char* restrict xq, global float* restrict xs, const int K,
                          const float eps, local acc_t* scratch) {
  const int t = get_group_id(0);
  norm_quant_row(x + (size_t)t * K, w, xq + (size_t)t * K, xs + t, K, eps, scratch);
}

/* f = act(gate) * up of gu [T, 2F] (gate | up) into f [T, F], then rmsnorm(f, w)
 * and int8 (xq [T, F], xs [T]); one work-group a row. */
kernel void act_norm_quant(global const float* restrict gu, global float* restrict f,
                           global const float* restrict w, global char* restrict xq,
                           global float* restrict xs, const int F, const int relu2,
                           const float eps, local acc_t* scratch) {
  const int t = get_group_id(0);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  global const float* g = gu + (size_t)t * 2 * F;
  global float* fr = f + (size_t)t * F;
  for (int k = lid; k < F; k += lsz) fr[k] = (relu2 ? relu2_f(g[k]) : silu_f(g[k])) * g[F + k];
  barrier(CLK_GLOBAL_MEM_FENCE);
  norm_quant_row(fr, w, xq + (size_t)t * F, xs + t, F, eps, scratch);
}

/* Token `tok`'s qkv row [Hq + 2 Hkv, D]: q heads rotated into its q row [Hq, D], k heads
 * rotated and v heads copied into row meta[pos_at] of the caches [S, Hkv, D]
 * (float32, or float16 rounded to nearest even: the _f16 kernel).
 * cs: the (cos, sin) table of positions 0.. (rot/2 pairs a row). */
#define DEFINE_ROPE_STORE(NAME, CT, STORE)                                                  \
  kernel void NAME(global const float* restrict qkv, global const float2* restrict cs,      \
                   global const int* restrict meta, const int pos_at, const int tok,        \
                   global float* restrict q, global CT* restrict kc, global CT* restrict vc, \
                   const int Hq, const int Hkv, const int D, const int rot, const int neox) { \
    const int d = get_global_id(0);                                                         \
    const int h = get_global_id(1);                                                         \
    if (d >= D) return;                                                                     \
    const int pos = meta[pos_at];                                                           \
    global const float* row = qkv + ((size_t)tok * (Hq + 2 * Hkv) + h) * D;                 \
    if (h >= Hq + Hkv) {                                                                    \
      STORE(row[d], ((size_t)pos * Hkv + (h - Hq - Hkv)) * D + d, vc);                      \
      return;                                                                               \
    }                                                                                       \
    const float r = rope_value(row, cs + (size_t)pos * (rot / 2), d, rot, neox);            \
    if (h < Hq)                                                                             \
      q[((size_t)tok * Hq + h) * D + d] = r;                                                \
    else                                                                                    \
      STORE(r, ((size_t)pos * Hkv + (h - Hq)) * D + d, kc);                                 \
  }
DEFINE_ROPE_STORE(rope_store, float, STORE_F32)
DEFINE_ROPE_STORE(rope_store_f16, half, STORE_F16)

/* Decode attention split over the keys (flash-decoding): work-group (head h,
 * split s) covers keys [s * span, (s + 1) * span) of the meta[pos_at] + 1
 * visible ones for query row `tok`: partial output po [Hq, S, D], (max, sum)
 * pml [Hq, S], from partial part0 on. */
#define DEFINE_ATTN_SPLIT(NAME, CT, ATTEND)                                                 \
  kernel void NAME(global const float* restrict q, global const CT* restrict kc,            \
                   global const CT* restrict vc, global const int* restrict meta,           \
                   const int pos_at, const int tok, const int part0,                        \
                   global float* restrict po, global float2* restrict pml,                  \
                   const int Hq, const int Hkv, const int D, const float scale,             \
                   const int span, local float* qv, local float* ov, local float* pv,       \
                   local float* scratch) {                                                  \
    const int h = get_group_id(0);                                                          \
    const int s = get_group_id(1);                                                          \
    const int lid = get_local_id(0), lsz = get_local_size(0);                               \
    const int k0 = s * span;                                                                \
    const size_t part = part0 + (size_t)h * get_num_groups(1) + s;                          \
    const float2 ml = ATTEND(q + ((size_t)tok * Hq + h) * D, kc, vc, h / (Hq / Hkv), Hkv, D, k0, \
                             min(meta[pos_at] + 1, k0 + span), scale, qv, ov, pv, scratch); \
    for (int d = lid; d < D; d += lsz) po[part * D + d] = ov[d];                            \
    if (lid == 0) pml[part] = ml; /* an empty split: (-inf, 0) */                           \
  }
DEFINE_ATTN_SPLIT(attn_split, float, attend_keys_f32)
DEFINE_ATTN_SPLIT(attn_split_f16, half, attend_keys_f16)

/* The S partials of every head (from partial part0 on) combined into att row
 * `tok` [Hq * D], then rmsnorm(att, w) and int8 (xq, xs row `tok`): one work-group. */
kernel void attn_merge_norm_quant(global const float* restrict po,
                                  global const float2* restrict pml, global float* restrict att,
                                  global const float* restrict w, global char* restrict xq,
                                  global float* restrict xs, const int Hq, const int D,
                                  const int S, const float eps, const int tok, const int part0,
                                  local acc_t* scratch) {
  const int lid = get_local_id(0), lsz = get_local_size(0);
  po += (size_t)part0 * D;
  pml += part0;
  att += (size_t)tok * Hq * D;
  xq += (size_t)tok * Hq * D;
  xs += tok;
  for (int i = lid; i < Hq * D; i += lsz) {
    const int h = i / D;
    const float2 ml = merge_max_sum(pml + (size_t)h * S, S);
    att[i] = merge_value(po + (size_t)h * S * D, pml + (size_t)h * S, S, D, i - h * D, ml);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  norm_quant_row(att, w, xq, xs, Hq * D, eps, scratch);
}
