/* Dense products with a [N, K] table (embeddings tied as the output head):
 * y[t, n] = sum_k x[t, k] * table[n, k]. One work-group per (row n, block of
 * DENSE_TB tokens); float32 accumulation. */
#define DENSE_TB 4

#define DEFINE_DENSE(NAME, TT, LOAD4, LOAD1)                                            \
  kernel void NAME(global const float* restrict x, global const TT* restrict table,     \
                   global float* restrict y, const int N, const int K, const int T,     \
                   local float* scratch) {                                              \
    const int n = get_group_id(0);                                                      \
    const int t0 = get_group_id(1) * DENSE_TB;                                          \
    const int lid = get_local_id(0), lsz = get_local_size(0);                           \
    global const TT* row = table + (size_t)n * K;                                       \
    const int nt = min(DENSE_TB, T - t0);                                               \
    float acc[DENSE_TB] = {0.0f};                                                       \
    const int k4 = K / 4;                                                               \
    for (int i = lid; i < k4; i += lsz) {                                               \
      const float4 w = LOAD4(i, row);                                                   \
      for (int j = 0; j < nt; ++j) acc[j] += dot(w, vload4(i, x + (size_t)(t0 + j) * K)); \
    }                                                                                   \
    for (int k = k4 * 4 + lid; k < K; k += lsz) {                                       \
      const float w = LOAD1(k, row);                                                    \
      for (int j = 0; j < nt; ++j) acc[j] += w * x[(size_t)(t0 + j) * K + k];           \
    }                                                                                   \
    for (int j = 0; j < DENSE_TB; ++j) {                                                \
      const float r = wg_sum_float(acc[j], scratch);                                    \
      if (lid == 0 && j < nt) y[(size_t)(t0 + j) * N + n] = r;                          \
    }                                                                                   \
  }

#define LOAD4_F32(i, p) vload4((i), (p))
#define LOAD1_F32(k, p) ((p)[k])
#define LOAD4_F16(i, p) vload_half4((i), (p))
#define LOAD1_F16(k, p) vload_half((k), (p))
DEFINE_DENSE(dense_f32, float, LOAD4_F32, LOAD1_F32)
DEFINE_DENSE(dense_f16, half, LOAD4_F16, LOAD1_F16)
