/* Ternary matrix products on the packed 2-bit layout of bitnet_opencl.weights:
 * W is [N, wstride4] uint4 (64 codes each; columns >= K hold the code 0), so
 * a weight row is wstride4 * 16 bytes. Activation buffers always carry at
 * least 64 bytes of slack past their end (the pool guarantees it): the int8
 * kernels may read past K, where the weight is 0. */

/* Decode GEMV: a work-group holds get_local_size(0) / lanes output rows, each
 * row read by `lanes` items (16 bytes a step, so a row's reads coalesce); the
 * lanes' partial sums meet in local memory. lanes = 1 (one item a row, the
 * CPU shape) skips the exchange. dim 1 is the token. gemv_i2s_add adds the
 * product to y (a residual add in the epilogue). */
#define DEFINE_GEMV_I2S(NAME, STORE)                                                     \
  kernel void NAME(global const uint4* restrict W, const int wstride4,                   \
                   global const char* restrict xq, global const float* restrict xs,      \
                   global const float* restrict scales, global float* restrict y,        \
                   const int N, const int K, const int lanes, local int* partial) {      \
    const int lid = get_local_id(0);                                                     \
    const int lane = lid % lanes;                                                        \
    const int n = get_group_id(0) * (get_local_size(0) / lanes) + lid / lanes;           \
    const int t = get_group_id(1);                                                       \
    global const char* xr = xq + (size_t)t * K;                                          \
    const int blocks = (K + 63) / 64;                                                    \
    const int al = (K & 15) == 0;                                                        \
    int acc = 0;                                                                         \
    if (n < N) {                                                                         \
      global const uint4* wr = W + (size_t)n * wstride4;                                 \
      for (int b = lane; b < blocks; b += lanes) {                                       \
        const uint4 w = wr[b];                                                           \
        global const char* xb = xr + b * 64;                                             \
        acc += dot16_i2(load_x16(xb, al), w.s0) + dot16_i2(load_x16(xb + 16, al), w.s1) + \
               dot16_i2(load_x16(xb + 32, al), w.s2) + dot16_i2(load_x16(xb + 48, al), w.s3); \
      }                                                                                  \
    }                                                                                    \
    if (lanes > 1) {                                                                     \
      partial[lid] = acc;                                                                \
      barrier(CLK_LOCAL_MEM_FENCE);                                                      \
      if (lane != 0) return;                                                             \
      for (int i = 1; i < lanes; ++i) acc += partial[lid + i];                           \
    }                                                                                    \
    if (n < N) STORE(y[(size_t)t * N + n], i2s_epilogue(acc, scales[n], xs[t]));        \
  }

#define STORE_SET(dst, v) (dst) = (v)
#define STORE_ADD(dst, v) (dst) = (dst) + (v)
DEFINE_GEMV_I2S(gemv_i2s, STORE_SET)
DEFINE_GEMV_I2S(gemv_i2s_add, STORE_ADD)

/* Prefill GEMM: a work-group of (8, 8) items computes a tile of 32 rows x 32
 * tokens, each item 4 rows x 4 tokens, stepping K by 64 codes through local
 * memory. */
#define GT 32
kernel void gemm_i2s(global const uint4* restrict W, const int wstride4,
                     global const char* restrict xq, global const float* restrict xs,
                     global const float* restrict scales, global float* restrict y,
                     const int N, const int K, const int T) {
  local uint wl[GT][4];
  local char16 xl[GT][4];
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int lin = ly * 8 + lx; /* 0..63 */
  const int n0 = get_group_id(0) * GT, t0 = get_group_id(1) * GT;
  const int blocks = (K + 63) / 64;
  const int al = (K & 15) == 0;
  int acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0;

  for (int b = 0; b < blocks; ++b) {
    /* weights: 32 rows x 4 words, two per item */
    for (int e = lin; e < GT * 4; e += 64) {
      const int r = e >> 2, q = e & 3;
      const int n = n0 + r;
      uint w = 0x55555555u; /* code 0 */
      if (n < N) {
        const uint4 v = W[(size_t)n * wstride4 + b];
        w = q == 0 ? v.s0 : q == 1 ? v.s1 : q == 2 ? v.s2 : v.s3;
      }
      wl[r][q] = w;
    }
    /* activations: 32 tokens x 64 bytes, two char16 per item */
    for (int e = lin; e < GT * 4; e += 64) {
      const int r = e >> 2, q = e & 3;
      const int t = t0 + r;
      xl[r][q] = t < T ? load_x16(xq + (size_t)t * K + b * 64 + q * 16, al) : (char16)(0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int q = 0; q < 4; ++q) {
      uint w[4];
      for (int i = 0; i < 4; ++i) w[i] = wl[lx + 8 * i][q];
      for (int j = 0; j < 4; ++j) {
        const char16 x = xl[ly + 8 * j][q];
        for (int i = 0; i < 4; ++i) acc[i][j] += dot16_i2(x, w[i]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int j = 0; j < 4; ++j) {
    const int t = t0 + ly + 8 * j;
    if (t >= T) continue;
    for (int i = 0; i < 4; ++i) {
      const int n = n0 + lx + 8 * i;
      if (n < N) y[(size_t)t * N + n] = i2s_epilogue(acc[i][j], scales[n], xs[t]);
    }
  }
}

/* Float activations times ternary weights: y[t, n] = sum_k x[t, k] * code[n, k] * scale[n];
 * rows and lanes as in gemv_i2s, one 32-bit word (16 codes) a step. */
kernel void gemv_ternary_f32(global const uint* restrict W, const int wstride4,
                             global const float* restrict x, global const float* restrict scales,
                             global float* restrict y, const int N, const int K,
                             const int lanes, local float* partial) {
  const int lid = get_local_id(0);
  const int lane = lid % lanes;
  const int n = get_group_id(0) * (get_local_size(0) / lanes) + lid / lanes;
  const int t = get_group_id(1);
  global const float* xr = x + (size_t)t * K;
  const int words = (K + 15) / 16;
  float acc = 0.0f;
  if (n < N) {
    global const uint* wr = W + (size_t)n * wstride4 * 4;
    for (int wi = lane; wi < words; wi += lanes) {
      const uint w = wr[wi];
      const int c0 = wi * 16;
      float16 xv;
      if (c0 + 16 <= K) {
        xv = vload16(0, xr + c0);
      } else {
        float tmp[16];
        for (int c = 0; c < 16; ++c) tmp[c] = c0 + c < K ? xr[c0 + c] : 0.0f;
        xv = vload16(0, tmp);
      }
      acc += dot(xv.s0123, convert_float4(as_char4(ternary_lanes(w, 0u)))) +
             dot(xv.s4567, convert_float4(as_char4(ternary_lanes(w, 1u)))) +
             dot(xv.s89ab, convert_float4(as_char4(ternary_lanes(w, 2u)))) +
             dot(xv.scdef, convert_float4(as_char4(ternary_lanes(w, 3u))));
    }
  }
  if (lanes > 1) {
    partial[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane != 0) return;
    for (int i = 1; i < lanes; ++i) acc += partial[lid + i];
  }
  if (n < N) y[(size_t)t * N + n] = acc * scales[n];
}
