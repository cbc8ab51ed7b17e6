/* Rotary position embedding of x [T, H, D] with host-computed tables
 * cs [*, rot/2, 2] (cos, sin), token t's row at pos0 + t (rope_value).
 * One work item per element; dimensions >= rot are copied. */
kernel void rope(global const float* restrict x, global const float2* restrict cs,
                 global float* restrict y, const int H, const int D, const int rot,
                 const int neox, const int pos0) {
  const int d = get_global_id(0);
  const int h = get_global_id(1);
  const int t = get_global_id(2);
  if (d >= D) return;
  const size_t base = ((size_t)t * H + h) * D;
  y[base + d] = rope_value(x + base, cs + (size_t)(pos0 + t) * (rot / 2), d, rot, neox);
}
