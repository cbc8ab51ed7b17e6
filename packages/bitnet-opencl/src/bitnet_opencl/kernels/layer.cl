/* A decode layer of one token in four launches (bitnet_opencl.runner, issue 48):
 *
 *   qkv_attend      norm + int8 of x, q|k|v rows of one query head, rope, K/V store,
 *                   attention over the cache (its splits, then their merge) -> att
 *   norm_gemv_add   norm + int8 of att (attn_sub_norm), o rows, x += o
 *   norm_gemv_act   norm + int8 of x (ffn_norm), gate and up rows, f = act(gate) * up
 *   norm_gemv_add   norm + int8 of f (ffn_sub_norm), down rows, x += down
 *
 * Each work-group normalises and quantises the whole input vector itself (hidden
 * or intermediate floats: a decode step's), so no launch waits on another's
 * work-groups. A qkv_attend work-group computes its query head's rows and its kv
 * group's k and v rows (the group's heads each recompute them; the first one
 * writes them into the cache), then attends over the cache with the current
 * position's key and value from its own local memory, never from the row being
 * written. Bit for bit the chain of fused.cl (rmsnorm_quant, gemv_i2s, rope_store,
 * attn_split, attn_merge_norm_quant, gemv_i2s_add, act_norm_quant): the sums run
 * as work-groups of the sizes those kernels ran with (`vls`: items from vls on
 * add zeros; the launches' groups are powers of two no smaller), the splits of
 * the attention are computed one after the other and merged as attn_merge does. */

/* norm_quant_row of xr as a group of vls items sums it, into local xq (K bytes,
 * then zeros up to `pad`); returns the scale (every item). */
inline float norm_quant_local(global const float* xr, global const float* w, local char* xq,
                              const int K, const int pad, const float eps, const int vls,
                              local acc_t* scratch) {
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const acc_t inv = row_inv_rms_v(xr, K, eps, vls, scratch);
  float m = 0.0f;
  for (int k = lid; k < K; k += lsz) m = fmax(m, fabs(norm_value(xr, w, k, inv)));
  m = wg_max_float(m, (local float*)scratch);
  const float s = div127(fmax(m, 1e-5f));
  for (int k = lid; k < pad; k += lsz)
    xq[k] = k < K ? convert_char_sat_rte(norm_value(xr, w, k, inv) * s) : (char)0;
  barrier(CLK_LOCAL_MEM_FENCE);
  return s;
}

/* The int dot product of weight row wr (`blocks` blocks of 64 codes) with the
 * local int8 row x, by `lanes` items a row (this item's `lane`), their sums met in
 * `partial`: valid on lane 0. Every item of the group calls it (`live`: the row
 * exists); it has barriers where lanes > 1. */
inline int row_dot_local(global const uint4* wr, local const char* x, const int blocks,
                         const int live, const int lane, const int lanes, local int* partial) {
  int acc = 0;
  if (live) {
    for (int b = lane; b < blocks; b += lanes) {
      const uint4 w = wr[b];
      local const char* xb = x + b * 64;
      acc += dot16_i2(vload16(0, xb), w.s0) + dot16_i2(vload16(1, xb), w.s1) +
             dot16_i2(vload16(2, xb), w.s2) + dot16_i2(vload16(3, xb), w.s3);
    }
  }
  const int lid = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE); /* partial's previous use is over */
  partial[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0)
    for (int i = 1; i < lanes; ++i) acc += partial[lid + i];
  return acc;
}

/* y[n] += rows n of W (ternary, [N, K]) times rmsnorm(xin, nw) in int8: the o and
 * down projections with the residual add. A group: get_local_size(0) / lanes rows. */
kernel void norm_gemv_add(global const float* restrict xin, global const float* restrict nw,
                          const int vls, const float eps, global const uint4* restrict W,
                          const int wstride4, global const float* restrict scales,
                          global float* restrict y, const int N, const int K, const int lanes,
                          local char* xl, local acc_t* scratch, local int* partial) {
  const int lid = get_local_id(0), lane = lid % lanes;
  const int blocks = (K + 63) / 64;
  const float xs = norm_quant_local(xin, nw, xl, K, blocks * 64, eps, vls, scratch);
  const int n = get_group_id(0) * (get_local_size(0) / lanes) + lid / lanes;
  const int acc =
      row_dot_local(W + (size_t)n * wstride4, xl, blocks, n < N, lane, lanes, partial);
  if (n < N && lane == 0) y[n] = y[n] + i2s_epilogue(acc, scales[n], xs);
}

/* f[n] = act(gate[n]) * up[n] of W = gate | up ([2F, K]) times rmsnorm(xin, nw) in
 * int8 (relu2: squared ReLU, else SiLU); a group's rows n take rows n and F + n. */
kernel void norm_gemv_act(global const float* restrict xin, global const float* restrict nw,
                          const int vls, const float eps, global const uint4* restrict W,
                          const int wstride4, global const float* restrict scales,
                          global float* restrict f, const int F, const int K, const int lanes,
                          const int relu2, local char* xl, local acc_t* scratch,
                          local int* partial) {
  const int lid = get_local_id(0), lane = lid % lanes;
  const int blocks = (K + 63) / 64;
  const float xs = norm_quant_local(xin, nw, xl, K, blocks * 64, eps, vls, scratch);
  const int n = get_group_id(0) * (get_local_size(0) / lanes) + lid / lanes;
  const int live = n < F;
  const int ag = row_dot_local(W + (size_t)n * wstride4, xl, blocks, live, lane, lanes, partial);
  const int au =
      row_dot_local(W + (size_t)(F + n) * wstride4, xl, blocks, live, lane, lanes, partial);
  if (live && lane == 0) {
    const float g = i2s_epilogue(ag, scales[n], xs);
    const float u = i2s_epilogue(au, scales[F + n], xs);
    f[n] = (relu2 ? relu2_f(g) : silu_f(g)) * u;
  }
}

/* attend_keys over a local query qv, the key `cur` (the current position) read
 * from kcur / vcur, not the cache; the sums as a group of vls items does them. */
#define DEFINE_ATTEND_CUR(NAME, CT, LOAD)                                                   \
  inline float2 NAME(local const float* qv, global const CT* kc, global const CT* vc,        \
                     local const CT* kcur, local const CT* vcur, const int cur,              \
                     const int hk, const int Hkv, const int D, const int k0, const int k1,   \
                     const float scale, local float* ov, local float* pv,                    \
                     local float* scratch, const int vls) {                                  \
    const int lid = get_local_id(0), lsz = get_local_size(0);                                \
    const size_t kstride = (size_t)Hkv * D;                                                  \
    for (int d = lid; d < D; d += lsz) ov[d] = 0.0f;                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                            \
    float m = -INFINITY, l = 0.0f;                                                           \
    for (int c = k0; c < k1; c += vls) {                                                     \
      const int j = c + lid;                                                                 \
      const int live = lid < vls && j < k1;                                                  \
      float sc = -INFINITY;                                                                  \
      if (live) {                                                                            \
        float acc = 0.0f;                                                                    \
        if (j == cur) {                                                                      \
          for (int d = 0; d < D; ++d) acc += qv[d] * LOAD(kcur, d);                          \
        } else {                                                                             \
          const size_t kr = (size_t)j * kstride + (size_t)hk * D;                            \
          for (int d = 0; d < D; ++d) acc += qv[d] * LOAD(kc, kr + d);                       \
        }                                                                                    \
        sc = acc * scale;                                                                    \
      }                                                                                      \
      const float mnew = fmax(m, wg_max_float(sc, scratch));                                 \
      const float p = live ? exp(sc - mnew) : 0.0f;                                          \
      pv[lid] = p;                                                                           \
      const float psum = wg_sum_float(p, scratch); /* its barriers publish pv */             \
      const float alpha = exp(m - mnew);                                                     \
      l = l * alpha + psum;                                                                  \
      m = mnew;                                                                              \
      const int cn = min(vls, k1 - c);                                                       \
      for (int d = lid; d < D; d += lsz) {                                                   \
        const size_t vcol = (size_t)c * kstride + (size_t)hk * D + d;                        \
        float o = ov[d] * alpha;                                                             \
        for (int jj = 0; jj < cn; ++jj)                                                      \
          o += pv[jj] * (c + jj == cur ? LOAD(vcur, d) : LOAD(vc, vcol + (size_t)jj * kstride)); \
        ov[d] = o;                                                                           \
      }                                                                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    return (float2)(m, l);                                                                   \
  }
DEFINE_ATTEND_CUR(attend_cur_f32, float, LOAD_F32)
DEFINE_ATTEND_CUR(attend_cur_f16, half, LOAD_F16)

/* Work-group h (query head h of kv group g = h / (Hq / Hkv)): rmsnorm(x, nw) in int8
 * (nvls), the rows of q head h, k head g and v head g of W = q|k|v (hv: 3 D floats),
 * q and k rotated at position meta[pos_at] (cs: the (cos, sin) table), k and v
 * written into row pos of the caches [*, Hkv, D] by the group's first head, then
 * the S splits of `span` keys (avls), partials po [Hq, S, D] and pml [Hq, S],
 * merged into att [Hq * D]. */
#define DEFINE_QKV_ATTEND(NAME, CT, STORE, ATTEND)                                          \
  kernel void NAME(global const float* restrict x, global const float* restrict nw,         \
                   const int nvls, const float eps, global const uint4* restrict W,         \
                   const int wstride4, global const float* restrict scales, const int K,    \
                   const int lanes, global const float2* restrict cs,                       \
                   global const int* restrict meta, const int pos_at, global CT* kc,        \
                   global CT* vc, const int Hq, const int Hkv, const int D, const int rot,  \
                   const int neox, const float scale, const int span, const int S,          \
                   const int avls, global float* po, global float2* pml,                    \
                   global float* restrict att, local char* xl, local acc_t* scratch,        \
                   local int* partial, local float* hv, local float* ov, local float* pv,   \
                   local CT* kcur, local CT* vcur) {                                        \
    const int lid = get_local_id(0), lsz = get_local_size(0), lane = lid % lanes;           \
    const int h = get_group_id(0), g = h / (Hq / Hkv);                                      \
    const int blocks = (K + 63) / 64;                                                       \
    const float xs = norm_quant_local(x, nw, xl, K, blocks * 64, eps, nvls, scratch);       \
    for (int i0 = 0; i0 < 3 * D; i0 += lsz / lanes) {                                       \
      const int i = i0 + lid / lanes, part = min(i / D, 2);                                 \
      const int row = (part == 0 ? h : Hq + (part - 1) * Hkv + g) * D + i - part * D;       \
      const int acc = row_dot_local(W + (size_t)row * wstride4, xl, blocks, i < 3 * D, lane, \
                                    lanes, partial);                                        \
      if (i < 3 * D && lane == 0) hv[i] = i2s_epilogue(acc, scales[row], xs);               \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    const int pos = meta[pos_at];                                                           \
    global const float2* csr = cs + (size_t)pos * (rot / 2);                                \
    const int writer = h % (Hq / Hkv) == 0;                                                 \
    const size_t crow = ((size_t)pos * Hkv + g) * D;                                        \
    local float* qv = hv + 3 * D;                                                           \
    for (int d = lid; d < D; d += lsz) {                                                    \
      qv[d] = rope_value_local(hv, csr, d, rot, neox);                                      \
      const float k = rope_value_local(hv + D, csr, d, rot, neox);                          \
      STORE(k, d, kcur);                                                                    \
      STORE(hv[2 * D + d], d, vcur);                                                        \
      if (writer) {                                                                         \
        STORE(k, crow + d, kc);                                                             \
        STORE(hv[2 * D + d], crow + d, vc);                                                 \
      }                                                                                     \
    }                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    for (int s = 0; s < S; ++s) {                                                           \
      const int k0 = s * span;                                                              \
      const float2 ml = ATTEND(qv, kc, vc, kcur, vcur, pos, g, Hkv, D, k0,                  \
                               min(pos + 1, k0 + span), scale, ov, pv,                      \
                               (local float*)scratch, avls);                                \
      const size_t part = (size_t)h * S + s;                                                \
      for (int d = lid; d < D; d += lsz) po[part * D + d] = ov[d];                          \
      if (lid == 0) pml[part] = ml; /* an empty split: (-inf, 0) */                         \
      barrier(CLK_LOCAL_MEM_FENCE);                                                         \
    }                                                                                       \
    barrier(CLK_GLOBAL_MEM_FENCE); /* this group's partials, written above */               \
    const float2 mls = merge_max_sum(pml + (size_t)h * S, S);                               \
    for (int d = lid; d < D; d += lsz)                                                      \
      att[(size_t)h * D + d] =                                                              \
          merge_value(po + (size_t)h * S * D, pml + (size_t)h * S, S, D, d, mls);           \
  }
DEFINE_QKV_ATTEND(qkv_attend, float, STORE_F32, attend_cur_f32)
DEFINE_QKV_ATTEND(qkv_attend_f16, half, STORE_F16, attend_cur_f16)
