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
