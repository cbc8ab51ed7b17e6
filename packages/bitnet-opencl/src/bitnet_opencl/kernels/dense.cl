/* Dense products with a [N, K] table (embeddings tied as the output head):
 * y[t, n] = sum_k x[t, k] * table[n, k], float32 accumulation. Rows and lanes
 * as in gemv_i2s (4 elements a step); dim 1 is a block of DENSE_TB tokens that
 * share each table read. */
#define DENSE_TB 4

#define DEFINE_DENSE(NAME, TT, LOAD4, LOAD1)                                             \
  kernel void NAME(global const float* restrict x, global const TT* restrict table,      \
                   global float* restrict y, const int N, const int K, const int T,      \
                   const int lanes, local float* partial) {                              \
    const int lid = get_local_id(0);                                                     \
    const int lane = lid % lanes;                                                        \
    const int n = get_group_id(0) * (get_local_size(0) / lanes) + lid / lanes;           \
    const int t0 = get_group_id(1) * DENSE_TB;                                           \
    const int nt = min(DENSE_TB, T - t0);                                                \
    float acc[DENSE_TB] = {0.0f};                                                        \
    if (n < N) {                                                                         \
      global const TT* row = table + (size_t)n * K;                                      \
      const int k4 = K / 4;                                                              \
      for (int i = lane; i < k4; i += lanes) {                                           \
        const float4 w = LOAD4(i, row);                                                  \
        for (int j = 0; j < nt; ++j) acc[j] += dot(w, vload4(i, x + (size_t)(t0 + j) * K)); \
      }                                                                                  \
      for (int k = k4 * 4 + lane; k < K; k += lanes) {                                   \
        const float w = LOAD1(k, row);                                                   \
        for (int j = 0; j < nt; ++j) acc[j] += w * x[(size_t)(t0 + j) * K + k];          \
      }                                                                                  \
    }                                                                                    \
    for (int j = 0; j < DENSE_TB; ++j) {                                                 \
      float r = acc[j];                                                                  \
      if (lanes > 1) {                                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        partial[lid] = r;                                                                \
        barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        if (lane == 0)                                                                   \
          for (int i = 1; i < lanes; ++i) r += partial[lid + i];                         \
      }                                                                                  \
      if (lane == 0 && n < N && j < nt) y[(size_t)(t0 + j) * N + n] = r;                 \
    }                                                                                    \
  }

#define LOAD4_F32(i, p) vload4((i), (p))
#define LOAD1_F32(k, p) ((p)[k])
#define LOAD4_F16(i, p) vload_half4((i), (p))
#define LOAD1_F16(k, p) vload_half((k), (p))
DEFINE_DENSE(dense_f32, float, LOAD4_F32, LOAD1_F32)
DEFINE_DENSE(dense_f16, half, LOAD4_F16, LOAD1_F16)
