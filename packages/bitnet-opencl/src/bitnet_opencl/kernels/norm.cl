/* Row-wise ops: one work-group per row of a [T, K] array. */

/* y = x / sqrt(mean(x^2) + eps) * w, accumulated in acc_t (float64 where available). */
kernel void rmsnorm(global const float* restrict x, global const float* restrict w,
                    global float* restrict y, const int K, const float eps,
                    local acc_t* scratch) {
  const int t = get_group_id(0);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  global const float* xr = x + (size_t)t * K;
  const acc_t inv = row_inv_rms(xr, K, eps, scratch);
  for (int k = lid; k < K; k += lsz) y[(size_t)t * K + k] = norm_value(xr, w, k, inv);
}

/* Per-row absmax int8 quantization: s = 127 / max(max|x|, 1e-5), xq = sat(rint(x * s)). */
kernel void quantize_act(global const float* restrict x, global char* restrict xq,
                         global float* restrict xs, const int K, local float* scratch) {
  const int t = get_group_id(0);
  const int lid = get_local_id(0), lsz = get_local_size(0);
  global const float* xr = x + (size_t)t * K;
  float m = 0.0f;
  for (int k = lid; k < K; k += lsz) m = fmax(m, fabs(xr[k]));
  m = wg_max_float(m, scratch);
  const float s = div127(fmax(m, 1e-5f));
  for (int k = lid; k < K; k += lsz) xq[(size_t)t * K + k] = convert_char_sat_rte(xr[k] * s);
  if (lid == 0) xs[t] = s;
}
