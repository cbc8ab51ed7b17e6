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
  const size_t kstride = (size_t)Hkv * D;
  global const float* qr = q + ((size_t)t * Hq + h) * D;
  for (int d = lid; d < D; d += lsz) {
    qv[d] = qr[d];
    ov[d] = 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float m = -INFINITY, l = 0.0f;
  for (int c = 0; c < n; c += lsz) {
    const int j = c + lid;
    float s = -INFINITY;
    if (j < n) {
      global const float* kr = kc + (size_t)j * kstride + (size_t)hk * D;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += qv[d] * kr[d];
      s = acc * scale;
    }
    const float mnew = fmax(m, wg_max_float(s, scratch));
    const float p = j < n ? exp(s - mnew) : 0.0f;
    pv[lid] = p;
    const float psum = wg_sum_float(p, scratch); /* its barriers publish pv */
    const float alpha = exp(m - mnew);
    l = l * alpha + psum;
    m = mnew;
    const int cn = min(lsz, n - c);
    for (int d = lid; d < D; d += lsz) {
      global const float* vcol = vc + (size_t)c * kstride + (size_t)hk * D + d;
      float o = ov[d] * alpha;
      for (int jj = 0; jj < cn; ++jj) o += pv[jj] * vcol[(size_t)jj * kstride];
      ov[d] = o;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
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
  const int k1 = min(n, k0 + span);
  const size_t kstride = (size_t)Hkv * D;
  const size_t part = ((size_t)t * Hq + h) * S + s;
  global const float* qr = q + ((size_t)t * Hq + h) * D;
  for (int d = lid; d < D; d += lsz) {
    qv[d] = qr[d];
    ov[d] = 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float m = -INFINITY, l = 0.0f;
  for (int c = k0; c < k1; c += lsz) {
    const int j = c + lid;
    float sc = -INFINITY;
    if (j < k1) {
      global const float* kr = kc + (size_t)j * kstride + (size_t)hk * D;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += qv[d] * kr[d];
      sc = acc * scale;
    }
    const float mnew = fmax(m, wg_max_float(sc, scratch));
    const float p = j < k1 ? exp(sc - mnew) : 0.0f;
    pv[lid] = p;
    const float psum = wg_sum_float(p, scratch);
    const float alpha = exp(m - mnew);
    l = l * alpha + psum;
    m = mnew;
    const int cn = min(lsz, k1 - c);
    for (int d = lid; d < D; d += lsz) {
      global const float* vcol = vc + (size_t)c * kstride + (size_t)hk * D + d;
      float o = ov[d] * alpha;
      for (int jj = 0; jj < cn; ++jj) o += pv[jj] * vcol[(size_t)jj * kstride];
      ov[d] = o;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int d = lid; d < D; d += lsz) po[part * D + d] = ov[d];
  if (lid == 0) pml[part] = (float2)(m, l); /* an empty split: (-inf, 0) */
}

kernel void attention_merge(global const float* restrict po, global const float2* restrict pml,
                            global float* restrict out, const int Hq, const int D,
                            const int S) {
  const int h = get_group_id(0);
  const int t = get_group_id(1);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const size_t base = ((size_t)t * Hq + h) * S;
  float mx = -INFINITY;
  for (int s = 0; s < S; ++s) mx = fmax(mx, pml[base + s].x);
  float l = 0.0f;
  for (int s = 0; s < S; ++s) l += pml[base + s].y * exp(pml[base + s].x - mx);
  for (int d = lid; d < D; d += lsz) {
    float o = 0.0f;
    for (int s = 0; s < S; ++s) {
      const float2 ml = pml[base + s];
      if (ml.y > 0.0f) o += po[(base + s) * D + d] * exp(ml.x - mx);
    }
    out[((size_t)t * Hq + h) * D + d] = o / l;
  }
}
