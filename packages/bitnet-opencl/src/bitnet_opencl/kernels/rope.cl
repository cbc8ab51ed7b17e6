/* Rotary position embedding of x [T, H, D] with host-computed tables
 * cs [*, rot/2, 2] (cos, sin), token t's row at pos0 + t. NEOX pairs (i, i + rot/2); NORM pairs (2i, 2i+1).
 * One work item per element; dimensions >= rot are copied. */
kernel void rope(global const float* restrict x, global const float2* restrict cs,
                 global float* restrict y, const int H, const int D, const int rot,
                 const int neox, const int pos0) {
  const int d = get_global_id(0);
  const int h = get_global_id(1);
  const int t = get_global_id(2);
  if (d >= D) return;
  const size_t base = ((size_t)t * H + h) * D;
  const float v = x[base + d];
  if (d >= rot) {
    y[base + d] = v;
    return;
  }
  const int hr = rot / 2;
  cs += (size_t)(pos0 + t) * hr;
  float2 c;
  float out;
  if (neox) {
    if (d < hr) {
      c = cs[d];
      out = v * c.x - x[base + d + hr] * c.y;
    } else {
      c = cs[d - hr];
      out = v * c.x + x[base + d - hr] * c.y;
    }
  } else {
    c = cs[d / 2];
    out = (d & 1) ? v * c.x + x[base + d - 1] * c.y : v * c.x - x[base + d + 1] * c.y;
  }
  y[base + d] = out;
}
