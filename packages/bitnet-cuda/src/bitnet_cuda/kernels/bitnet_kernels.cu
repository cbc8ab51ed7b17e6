// BitNet b1.58 CUDA kernels (extern "C" so CuPy's RawModule finds them by name).
//
// Layouts (the same as bitnet-webgpu's, see provider.py):
// - ternary weights: uint32 [N, kw] with kw a multiple of 4 (rows padded to 64
//   columns so each lane can load 16 bytes); the code (value + 1) of column
//   16*w + 4*j + i sits at bits 8*i + 2*j of word w, so (word >> 2j) & 0x03030303
//   is four unsigned bytes lined up with activation word j: dp4a(x, codes) - sum(x)
//   = dot(x, value).
// - activations: int8 [T, kp] (kp = kw * 16, zero padded) read as int32 words,
//   with per-row scale (127 / absmax) and per-row sum of the int8 values.
#include <cuda_fp16.h>
#include <stdint.h>

#define WARP 32
#define MAXT 8  // tokens a GEMV block handles at once

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ int warp_sum_i(int v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions over blockDim.x threads (a multiple of 32, <= 1024).
__device__ float block_sum(float v, float* shared) {
    int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[wid] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / WARP ? shared[lane] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}
__device__ float block_max(float v, float* shared) {
    int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[wid] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / WARP ? shared[lane] : -3.0e38f;
    v = warp_max(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}

// Per-token absmax int8 quantization: one block per row.
extern "C" __global__ void quantize_act(const float* __restrict__ x, int8_t* __restrict__ xq,
                                        float* __restrict__ scale, int* __restrict__ xsum,
                                        int k, int kp) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float* row = x + (size_t)t * k;
    float m = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
    m = block_max(m, red);
    const float s = 127.0f / fmaxf(m, 1e-5f);
    float acc = 0.0f;
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        int q = 0;
        if (i < k) {
            q = __float2int_rn(row[i] * s);  // round half to even, as numpy and torch
            q = max(-128, min(127, q));
        }
        xq[(size_t)t * kp + i] = (int8_t)q;
        acc += (float)q;
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        scale[t] = s;
        xsum[t] = (int)acc;  // |sum| <= 128 * kp, exact in float for kp < 2^17
    }
}

// Ternary x int8 GEMV/GEMM tile: one warp per output row, MAXT tokens per block row.
// Each lane loads 16 bytes of weights (64 codes) and 4 x 16 bytes of activations.
extern "C" __global__ void matmul_i2s(const uint4* __restrict__ w, const float* __restrict__ wscale,
                                      const int4* __restrict__ xq, const float* __restrict__ xscale,
                                      const int* __restrict__ xsum, float* __restrict__ y,
                                      int n, int kw4, int t_total) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int t0 = blockIdx.y * MAXT;
    const int tcount = min(MAXT, t_total - t0);
    if (row >= n) return;
    int acc[MAXT];
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) acc[tt] = 0;
    const uint4* wrow = w + (size_t)row * kw4;
    for (int g = lane; g < kw4; g += WARP) {
        const uint4 wv = __ldg(wrow + g);
        const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) {
            if (tt >= tcount) break;
            const int4* xrow = xq + (size_t)(t0 + tt) * kw4 * 4 + g * 4;
            int a = acc[tt];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int4 xv = __ldg(xrow + q);
                const uint32_t word = words[q];
                a = __dp4a(xv.x, (int)(word & 0x03030303u), a);
                a = __dp4a(xv.y, (int)((word >> 2) & 0x03030303u), a);
                a = __dp4a(xv.z, (int)((word >> 4) & 0x03030303u), a);
                a = __dp4a(xv.w, (int)((word >> 6) & 0x03030303u), a);
            }
            acc[tt] = a;
        }
    }
    const float ws = wscale[row];
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) {
        if (tt >= tcount) break;
        const int total = warp_sum_i(acc[tt]);
        if (lane == 0) {
            const int t = t0 + tt;
            y[(size_t)t * n + row] = (float)(total - xsum[t]) * ws / xscale[t];
        }
    }
}

// y[t, n] = sum_k x[t, k] * table[n, k] with an f16 table (rows padded to even k): the tied head.
extern "C" __global__ void matmul_dense_f16(const __half2* __restrict__ table, const float* __restrict__ x,
                                            float* __restrict__ y, int n, int k, int kw2, int t_total) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int t0 = blockIdx.y * MAXT;
    const int tcount = min(MAXT, t_total - t0);
    if (row >= n) return;
    float acc[MAXT];
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) acc[tt] = 0.0f;
    const __half2* trow = table + (size_t)row * kw2;
    for (int i = lane; i < kw2; i += WARP) {
        const float2 wv = __half22float2(__ldg(trow + i));
        const int k0 = 2 * i;
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) {
            if (tt >= tcount) break;
            const float* xr = x + (size_t)(t0 + tt) * k;
            float v = wv.x * xr[k0];
            if (k0 + 1 < k) v += wv.y * xr[k0 + 1];
            acc[tt] += v;
        }
    }
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) {
        if (tt >= tcount) break;
        const float total = warp_sum(acc[tt]);
        if (lane == 0) y[(size_t)(t0 + tt) * n + row] = total;
    }
}

// RMSNorm over rows of d: one block per row.
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ g,
                                   float* __restrict__ y, int d, float eps) {
    __shared__ float red[32];
    const size_t base = (size_t)blockIdx.x * d;
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float v = x[base + i];
        s += v * v;
    }
    s = block_sum(s, red);
    const float inv = rsqrtf(s / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[base + i] = x[base + i] * inv * g[i];
}

// Rotary embedding of x [T, H, D]: one thread per rotated pair; style 0 neox, 1 norm.
extern "C" __global__ void rope(const float* __restrict__ x, const int* __restrict__ pos,
                                float* __restrict__ y, int t, int h, int d, int rot, int style,
                                float log2_theta) {
    const int half = rot / 2;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long pairs = (long long)t * h * half;
    const long long rest = (long long)t * h * (d - rot);
    if (idx < pairs) {
        const int i = idx % half;
        const long long rowi = idx / half;
        const int ti = (int)(rowi / h);
        const size_t base = (size_t)rowi * d;
        const int a = style == 0 ? i : 2 * i;
        const int b = style == 0 ? i + half : 2 * i + 1;
        const float freq = exp2f(-log2_theta * (float)(2 * i) / (float)rot);
        float sn, cs;
        sincosf((float)pos[ti] * freq, &sn, &cs);
        const float xa = x[base + a], xb = x[base + b];
        y[base + a] = xa * cs - xb * sn;
        y[base + b] = xb * cs + xa * sn;
    } else if (idx < pairs + rest) {  // copy the dimensions past rot
        const long long j = idx - pairs;
        const long long rowi = j / (d - rot);
        const int e = rot + (int)(j % (d - rot));
        y[(size_t)rowi * d + e] = x[(size_t)rowi * d + e];
    }
}

// Causal GQA attention over a cache [S, Hkv, D]: one block per (query t, head h).
// Scores go to a global scratch [T, Hq, n] so any context length fits.
extern "C" __global__ void attention(const float* __restrict__ q, const float* __restrict__ kc,
                                     const float* __restrict__ vc, float* __restrict__ scores,
                                     float* __restrict__ out, int hq, int hkv, int d, int start,
                                     int n_max, float scale) {
    __shared__ float red[32];
    const int t = blockIdx.x, h = blockIdx.y;
    const int kvh = h / (hq / hkv);
    const int n = start + t + 1;
    const float* qv = q + ((size_t)t * hq + h) * d;
    float* sc = scores + ((size_t)t * hq + h) * n_max;
    float m = -3.0e38f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const float* kv = kc + ((size_t)s * hkv + kvh) * d;
        float acc = 0.0f;
        for (int i = 0; i < d; i++) acc += qv[i] * kv[i];
        acc *= scale;
        sc[s] = acc;
        m = fmaxf(m, acc);
    }
    m = block_max(m, red);
    float sum = 0.0f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const float e = expf(sc[s] - m);
        sc[s] = e;
        sum += e;
    }
    sum = block_sum(sum, red);  // its __syncthreads also orders the scratch writes
    const float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++) acc += sc[s] * vc[((size_t)s * hkv + kvh) * d + i];
        out[((size_t)t * hq + h) * d + i] = acc * inv;
    }
}
