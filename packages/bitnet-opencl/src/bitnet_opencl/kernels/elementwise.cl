/* Element-wise ops on float32 arrays, one work item per element; `b` may be
 * broadcast over `a` as a trailing block of nb elements. */
kernel void add(global const float* a, global const float* b, global float* y, const int nb) {
  const size_t i = get_global_id(0);
  y[i] = a[i] + b[i % nb];
}

kernel void mul(global const float* a, global const float* b, global float* y, const int nb) {
  const size_t i = get_global_id(0);
  y[i] = a[i] * b[i % nb];
}

kernel void silu(global const float* x, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = silu_f(x[i]);
}

kernel void relu2(global const float* x, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = relu2_f(x[i]);
}

kernel void silu_mul(global const float* g, global const float* u, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = silu_f(g[i]) * u[i];
}

kernel void relu2_mul(global const float* g, global const float* u, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = relu2_f(g[i]) * u[i];
}

/* Rows of a [V, K] table gathered by token id, as float32 [T, K]. */
kernel void embedding_f32(global const float* table, global const int* ids, global float* y,
                          const int K) {
  const int k = get_global_id(0), t = get_global_id(1);
  if (k < K) y[(size_t)t * K + k] = table[(size_t)ids[t] * K + k];
}

kernel void embedding_f16(global const half* table, global const int* ids, global float* y,
                          const int K) {
  const int k = get_global_id(0), t = get_global_id(1);
  if (k < K) y[(size_t)t * K + k] = vload_half((size_t)ids[t] * K + k, table);
}

/* float32 -> float16 (round to nearest even) into y from element `offset` on
 * (rows written into a float16 KV cache). */
kernel void store_f16(global const float* x, global half* y, const int offset) {
  const size_t i = get_global_id(0);
  vstore_half_rte(x[i], offset + i, y);
}
