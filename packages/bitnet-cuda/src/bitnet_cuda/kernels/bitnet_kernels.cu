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
// - KV cache: [capacity, kv_heads, head_dim] in float32 or float16 (kernels with
//   an _f16 suffix); values are converted to float32 as they are read.
// - embedding/output tables: float32 [N, k], or float16 / bfloat16 [N, kp] with
//   rows padded to kp, a multiple of 8, so the head reads 16 bytes a lane.
//
// The kernels after "fused decode step" are the CUDA runner's (runner.py): they
// read the token ids and the position from device memory, so one decode step can
// be captured in a CUDA graph and replayed at every position.
#include <cuda_fp16.h>
#include <stdint.h>

#define WARP 32
#define MAXT 8        // tokens a GEMV block handles at once
#define MAXD 256      // head_dim limit of the split (flash-decoding) attention
#define MAX_PARTS 4096  // heads x splits of one split attention
#define MAX_SPLITS 64   // splits of one head (runner.py's split_count)

// bfloat16 as its bit pattern: the top 16 bits of a float32.
struct bf16 {
    unsigned short bits;
};
__device__ __forceinline__ float bf16_bits_to_float(uint32_t b) { return __uint_as_float(b << 16); }

__device__ __forceinline__ float load_f(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const __half* p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_f(const bf16* p, size_t i) { return bf16_bits_to_float(p[i].bits); }
__device__ __forceinline__ void store_f(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }

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

// Absmax int8 quantization of one row of k values, value(i) read by the calling thread at
// i = threadIdx.x + j * blockDim.x: codes into xq[0, kp) (zero padded), the scale
// 127 / absmax and the sum of the codes. Every thread of the block calls it.
template <typename Value>
__device__ void quantize_row(Value value, int k, int kp, int8_t* __restrict__ xq,
                             float* __restrict__ scale, int* __restrict__ xsum, float* red) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) m = fmaxf(m, fabsf(value(i)));
    m = block_max(m, red);
    const float s = 127.0f / fmaxf(m, 1e-5f);
    float acc = 0.0f;
    for (int i = threadIdx.x; i < kp; i += blockDim.x) {
        int q = 0;
        if (i < k) {
            q = __float2int_rn(value(i) * s);  // round half to even, as numpy and torch
            q = max(-128, min(127, q));
        }
        xq[i] = (int8_t)q;
        acc += (float)q;
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        *scale = s;
        *xsum = (int)acc;  // |sum| <= 128 * kp, exact in float for kp < 2^17
    }
}

// Per-token absmax int8 quantization: one block per row.
extern "C" __global__ void quantize_act(const float* __restrict__ x, int8_t* __restrict__ xq,
                                        float* __restrict__ scale, int* __restrict__ xsum,
                                        int k, int kp) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float* row = x + (size_t)t * k;
    quantize_row([&](int i) { return row[i]; }, k, kp, xq + (size_t)t * kp, scale + t, xsum + t,
                 red);
}

// A ternary product's float value from its int32 dot (codes value + 1) with the int8 row
// of sum xsum and scale xscale: every matmul's epilogue, so every kernel rounds alike.
__device__ __forceinline__ float i2s_value(int dot, int xsum, float wscale, float xscale) {
    return (float)(dot - xsum) * wscale / xscale;
}

// One row's outputs for tokens t0 .. t0 + tcount from each lane's int32 partial dots:
// warp-summed, then y[t, row] (+)= (dot - xsum[t]) * wscale[row] / xscale[t] (lane 0).
template <bool ADD>
__device__ __forceinline__ void i2s_store_row(const int (&acc)[MAXT], int lane, int row, int t0,
                                              int tcount, const float* __restrict__ wscale,
                                              const float* __restrict__ xscale,
                                              const int* __restrict__ xsum, float* y, int n) {
    const float ws = wscale[row];
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) {
        if (tt >= tcount) break;
        const int total = warp_sum_i(acc[tt]);
        if (lane == 0) {
            const int t = t0 + tt;
            const float v = i2s_value(total, xsum[t], ws, xscale[t]);
            y[(size_t)t * n + row] = ADD ? y[(size_t)t * n + row] + v : v;
        }
    }
}

// Ternary x int8 GEMV/GEMM tile: one warp per output row, MAXT tokens per block row.
// Each lane loads 16 bytes of weights (64 codes) and 4 x 16 bytes of activations.
// With ADD, y += the product (the residual connection; y may be read and written).
template <bool ADD>
__device__ void matmul_i2s_body(const uint4* __restrict__ w, const float* __restrict__ wscale,
                                const int4* __restrict__ xq, const float* __restrict__ xscale,
                                const int* __restrict__ xsum, float* y, int n, int kw4,
                                int t_total) {
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
    i2s_store_row<ADD>(acc, lane, row, t0, tcount, wscale, xscale, xsum, y, n);
}
extern "C" __global__ void matmul_i2s(const uint4* __restrict__ w, const float* __restrict__ wscale,
                                      const int4* __restrict__ xq, const float* __restrict__ xscale,
                                      const int* __restrict__ xsum, float* y, int n, int kw4,
                                      int t_total) {
    matmul_i2s_body<false>(w, wscale, xq, xscale, xsum, y, n, kw4, t_total);
}
extern "C" __global__ void matmul_i2s_add(const uint4* __restrict__ w, const float* __restrict__ wscale,
                                          const int4* __restrict__ xq, const float* __restrict__ xscale,
                                          const int* __restrict__ xsum, float* y, int n, int kw4,
                                          int t_total) {
    matmul_i2s_body<true>(w, wscale, xq, xscale, xsum, y, n, kw4, t_total);
}

// The same product for T >= 2 (batched decode steps, short prompts): one warp computes R
// rows, so each activation load feeds R rows' dp4a (matmul_i2s reloads them a row). Lanes
// take consecutive weight words (16 columns, one int4 of activations each), so a warp's
// activation load is 512 contiguous bytes; each lane loads I2S_U words a row ahead. The
// int32 sums are exact in any order: the results are matmul_i2s's, bit for bit.
#define I2S_U 4
template <int R, bool ADD>
__device__ void matmul_i2s_rows_body(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                     const int4* __restrict__ xq, const float* __restrict__ xscale,
                                     const int* __restrict__ xsum, float* y, int n, int kw,
                                     int t_total) {
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * R;
    const int t0 = blockIdx.y * MAXT;
    const int tcount = min(MAXT, t_total - t0);
    if (row0 >= n) return;
    const uint32_t* wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = w + (size_t)min(row0 + r, n - 1) * kw;  // past n: dropped
    const int4* xr = xq + (size_t)t0 * kw;  // a token's row: kw int4s
    int acc[R][MAXT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) acc[r][tt] = 0;
    for (int i0 = lane; i0 < kw; i0 += WARP * I2S_U) {
        uint32_t wv[I2S_U][R];
#pragma unroll
        for (int u = 0; u < I2S_U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[u][r] = i0 + u * WARP < kw ? __ldg(wr[r] + i0 + u * WARP) : 0u;
#pragma unroll
        for (int u = 0; u < I2S_U; u++) {
            const int i = i0 + u * WARP;
            if (i >= kw) break;
#pragma unroll
            for (int tt = 0; tt < MAXT; tt++) {
                if (tt >= tcount) break;
                const int4 xv = __ldg(xr + (size_t)tt * kw + i);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t word = wv[u][r];
                    int a = acc[r][tt];
                    a = __dp4a(xv.x, (int)(word & 0x03030303u), a);
                    a = __dp4a(xv.y, (int)((word >> 2) & 0x03030303u), a);
                    a = __dp4a(xv.z, (int)((word >> 4) & 0x03030303u), a);
                    a = __dp4a(xv.w, (int)((word >> 6) & 0x03030303u), a);
                    acc[r][tt] = a;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r >= n) break;  // warp-uniform
        i2s_store_row<ADD>(acc[r], lane, row0 + r, t0, tcount, wscale, xscale, xsum, y, n);
    }
}
// (entry points written out: the CUDA emulator finds kernels by their extern "C" lines)
extern "C" __global__ void matmul_i2s_r2(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                         const int4* __restrict__ xq, const float* __restrict__ xscale,
                                         const int* __restrict__ xsum, float* y, int n, int kw, int t_total) {
    matmul_i2s_rows_body<2, false>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}
extern "C" __global__ void matmul_i2s_r2_add(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                             const int4* __restrict__ xq, const float* __restrict__ xscale,
                                             const int* __restrict__ xsum, float* y, int n, int kw, int t_total) {
    matmul_i2s_rows_body<2, true>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}
extern "C" __global__ void matmul_i2s_r4(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                         const int4* __restrict__ xq, const float* __restrict__ xscale,
                                         const int* __restrict__ xsum, float* y, int n, int kw, int t_total) {
    matmul_i2s_rows_body<4, false>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}
extern "C" __global__ void matmul_i2s_r4_add(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                             const int4* __restrict__ xq, const float* __restrict__ xscale,
                                             const int* __restrict__ xsum, float* y, int n, int kw, int t_total) {
    matmul_i2s_rows_body<4, true>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}

// Prefill GEMM on int8 tensor cores (sm_80+): mma.sync m16n8k32, weight codes (value + 1,
// unsigned) x int8 activations -> int32, then the same epilogue as matmul_i2s. Fragments
// (PTX ISA, "matrix fragments for mma.m16n8k32"; g = lane / 4, c = lane % 4):
//   A (16 rows x 32 k): a0 = row g, k 4c..4c+3; a1 = row g+8, same k; a2, a3: k + 16
//   B (32 k x 8 tokens): b0 = token g, k 4c..4c+3; b1: k + 16
//   D (16 x 8): d0, d1 = row g, tokens 2c, 2c+1; d2, d3 = row g+8
// In the packed layout, (word >> 2c) & 0x03030303 is the codes of columns 16w+4c..16w+4c+3:
// one A register straight from a weight word. One warp: 16 rows x MMA_NT*8 tokens.
#define MMA_NT 4
#define MMA_WARPS 4

__device__ __forceinline__ void mma_u8s8(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(BITNET_CUDA_EMULATOR)
    bitnet_emu::mma_m16n8k32_u8s8(d, a, b);
#elif __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // the provider launches this kernel on compute capability 8.0+ only
#endif
}

template <bool ADD>
__device__ void matmul_i2s_mma_body(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                    const int* __restrict__ xq, const float* __restrict__ xscale,
                                    const int* __restrict__ xsum, float* y, int n, int kw,
                                    int t_total) {
    const int lane = threadIdx.x % WARP, g = lane / 4, c = lane % 4;
    const int row0 = (blockIdx.x * MMA_WARPS + threadIdx.x / WARP) * 16;
    const int tok0 = blockIdx.y * MMA_NT * 8;
    if (row0 >= n) return;  // whole warps only: mma.sync needs every lane
    const uint32_t* wr0 = w + (size_t)min(row0 + g, n - 1) * kw;
    const uint32_t* wr1 = w + (size_t)min(row0 + g + 8, n - 1) * kw;
    const int kp4 = kw * 4;  // int32 words of an activation row
    const int* xr[MMA_NT];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) xr[j] = xq + (size_t)min(tok0 + j * 8 + g, t_total - 1) * kp4;
    int acc[MMA_NT][4];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    for (int k = 0; k < kw; k += 2) {  // 32 columns: words k, k + 1 of each row
        const uint32_t a[4] = {(__ldg(wr0 + k) >> (2 * c)) & 0x03030303u,
                               (__ldg(wr1 + k) >> (2 * c)) & 0x03030303u,
                               (__ldg(wr0 + k + 1) >> (2 * c)) & 0x03030303u,
                               (__ldg(wr1 + k + 1) >> (2 * c)) & 0x03030303u};
#pragma unroll
        for (int j = 0; j < MMA_NT; j++) {
            const uint32_t b[2] = {(uint32_t)__ldg(xr[j] + 8 * (k / 2) + c),
                                   (uint32_t)__ldg(xr[j] + 8 * (k / 2) + 4 + c)};
            mma_u8s8(acc[j], a, b);
        }
    }
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int row = row0 + g + (r >= 2 ? 8 : 0);
            const int t = tok0 + j * 8 + 2 * c + (r & 1);
            if (row < n && t < t_total) {
                const float v = i2s_value(acc[j][r], xsum[t], wscale[row], xscale[t]);
                y[(size_t)t * n + row] = ADD ? y[(size_t)t * n + row] + v : v;
            }
        }
    }
}
extern "C" __global__ void matmul_i2s_mma(const uint32_t* __restrict__ w, const float* __restrict__ wscale,
                                          const int* __restrict__ xq, const float* __restrict__ xscale,
                                          const int* __restrict__ xsum, float* y, int n, int kw,
                                          int t_total) {
    matmul_i2s_mma_body<false>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}
extern "C" __global__ void matmul_i2s_mma_add(const uint32_t* __restrict__ w,
                                              const float* __restrict__ wscale,
                                              const int* __restrict__ xq,
                                              const float* __restrict__ xscale,
                                              const int* __restrict__ xsum, float* y, int n, int kw,
                                              int t_total) {
    matmul_i2s_mma_body<true>(w, wscale, xq, xscale, xsum, y, n, kw, t_total);
}

// y[t, n] = sum_k x[t, k] * table[n, k]: the head. A 16-bit table (f16 or bf16, rows
// padded to a multiple of 8) is read 8 values a 16-byte load, an f32 one a float at a
// time; DenseRow<FORMAT> says how.
struct F16x8;
struct BF16x8;
template <typename FORMAT>
struct DenseRow;
template <>
struct DenseRow<F16x8> {
    using Word = uint4;
    static constexpr int cols = 8;
    __device__ static float value(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }
};
template <>
struct DenseRow<BF16x8> {
    using Word = uint4;
    static constexpr int cols = 8;
    __device__ static float value(uint32_t bits) { return bf16_bits_to_float(bits); }
};
template <>
struct DenseRow<float> {
    using Word = float;
    static constexpr int cols = 1;
};
template <typename FORMAT>
__device__ __forceinline__ void load_dense(const typename DenseRow<FORMAT>::Word* row, int i,
                                           float (&v)[DenseRow<FORMAT>::cols]) {
    const uint4 w = __ldg(row + i);
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        v[2 * j] = DenseRow<FORMAT>::value(u[j] & 0xffffu);
        v[2 * j + 1] = DenseRow<FORMAT>::value(u[j] >> 16);
    }
}
template <>
__device__ __forceinline__ void load_dense<float>(const float* row, int i, float (&v)[1]) {
    v[0] = __ldg(row + i);
}
// `loads` is the row length in Words (the padded row / cols).
template <typename FORMAT>
__device__ void matmul_dense_body(const typename DenseRow<FORMAT>::Word* __restrict__ table,
                                  const float* __restrict__ x, float* __restrict__ y, int n, int k,
                                  int loads, int t_total) {
    constexpr int C = DenseRow<FORMAT>::cols;
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int t0 = blockIdx.y * MAXT;
    const int tcount = min(MAXT, t_total - t0);
    if (row >= n) return;
    float acc[MAXT];
#pragma unroll
    for (int tt = 0; tt < MAXT; tt++) acc[tt] = 0.0f;
    const typename DenseRow<FORMAT>::Word* trow = table + (size_t)row * loads;
    for (int i = lane; i < loads; i += WARP) {
        float wv[C];
        load_dense<FORMAT>(trow, i, wv);
        const int k0 = C * i;
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) {
            if (tt >= tcount) break;
            const float* xr = x + (size_t)(t0 + tt) * k;
            // (nvcc contracts `v += w * x` to this fma; spelled out so that the multi-row
            // kernel below, the emulator and this one round alike)
            float v = wv[0] * xr[k0];
#pragma unroll
            for (int c = 1; c < C; c++)
                if (k0 + c < k) v = __fmaf_rn(wv[c], xr[k0 + c], v);
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
extern "C" __global__ void matmul_dense_f16(const uint4* __restrict__ table, const float* __restrict__ x,
                                            float* __restrict__ y, int n, int k, int loads, int t_total) {
    matmul_dense_body<F16x8>(table, x, y, n, k, loads, t_total);
}
extern "C" __global__ void matmul_dense_bf16(const uint4* __restrict__ table, const float* __restrict__ x,
                                             float* __restrict__ y, int n, int k, int loads, int t_total) {
    matmul_dense_body<BF16x8>(table, x, y, n, k, loads, t_total);
}
extern "C" __global__ void matmul_dense_f32(const float* __restrict__ table, const float* __restrict__ x,
                                            float* __restrict__ y, int n, int k, int t_total) {
    matmul_dense_body<float>(table, x, y, n, k, k, t_total);
}

// The head for T >= 2: one warp computes R rows, so each x load feeds R rows' FMAs, and a
// lane's 8 x values for a 16-bit table come in two float4 loads (k a multiple of 8, x
// 16-byte aligned: the host checks; an f32 table's x loads are coalesced floats already).
// Each (row, token) sums in matmul_dense_body's order: same lanes, same fmas, same
// warp_sum, so a row's logits do not depend on the other tokens or on the kernel.
template <int C>
__device__ __forceinline__ void load_x(const float* p, float (&v)[C]);
template <>
__device__ __forceinline__ void load_x<8>(const float* p, float (&v)[8]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <>
__device__ __forceinline__ void load_x<1>(const float* p, float (&v)[1]) {
    v[0] = __ldg(p);
}
template <typename FORMAT, int R>
__device__ void matmul_dense_rows_body(const typename DenseRow<FORMAT>::Word* __restrict__ table,
                                       const float* __restrict__ x, float* __restrict__ y, int n,
                                       int k, int loads, int t_total) {
    constexpr int C = DenseRow<FORMAT>::cols;
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP) * R;
    const int t0 = blockIdx.y * MAXT;
    const int tcount = min(MAXT, t_total - t0);
    if (row0 >= n) return;
    const typename DenseRow<FORMAT>::Word* trow[R];
#pragma unroll
    for (int r = 0; r < R; r++) trow[r] = table + (size_t)min(row0 + r, n - 1) * loads;
    float acc[R][MAXT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) acc[r][tt] = 0.0f;
    for (int i = lane; i < loads; i += WARP) {
        float wv[R][C];
#pragma unroll
        for (int r = 0; r < R; r++) load_dense<FORMAT>(trow[r], i, wv[r]);
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) {
            if (tt >= tcount) break;
            float xv[C];
            load_x<C>(x + (size_t)(t0 + tt) * k + C * i, xv);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float v = wv[r][0] * xv[0];
#pragma unroll
                for (int c = 1; c < C; c++) v = __fmaf_rn(wv[r][c], xv[c], v);
                acc[r][tt] += v;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r >= n) break;  // warp-uniform
#pragma unroll
        for (int tt = 0; tt < MAXT; tt++) {
            if (tt >= tcount) break;
            const float total = warp_sum(acc[r][tt]);
            if (lane == 0) y[(size_t)(t0 + tt) * n + row0 + r] = total;
        }
    }
}
extern "C" __global__ void matmul_dense_f16_r4(const uint4* __restrict__ table,
                                               const float* __restrict__ x, float* __restrict__ y,
                                               int n, int k, int loads, int t_total) {
    matmul_dense_rows_body<F16x8, 4>(table, x, y, n, k, loads, t_total);
}
extern "C" __global__ void matmul_dense_bf16_r4(const uint4* __restrict__ table,
                                                const float* __restrict__ x, float* __restrict__ y,
                                                int n, int k, int loads, int t_total) {
    matmul_dense_rows_body<BF16x8, 4>(table, x, y, n, k, loads, t_total);
}
extern "C" __global__ void matmul_dense_f32_r4(const float* __restrict__ table,
                                               const float* __restrict__ x, float* __restrict__ y,
                                               int n, int k, int t_total) {
    matmul_dense_rows_body<float, 4>(table, x, y, n, k, k, t_total);
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
template <typename KV>
__device__ void attention_body(const float* __restrict__ q, const KV* __restrict__ kc,
                               const KV* __restrict__ vc, float* __restrict__ scores,
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
        const size_t kv = ((size_t)s * hkv + kvh) * d;
        float acc = 0.0f;
        for (int i = 0; i < d; i++) acc += qv[i] * load_f(kc, kv + i);
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
        for (int s = 0; s < n; s++) acc += sc[s] * load_f(vc, ((size_t)s * hkv + kvh) * d + i);
        out[((size_t)t * hq + h) * d + i] = acc * inv;
    }
}
extern "C" __global__ void attention(const float* __restrict__ q, const float* __restrict__ kc,
                                     const float* __restrict__ vc, float* __restrict__ scores,
                                     float* __restrict__ out, int hq, int hkv, int d, int start,
                                     int n_max, float scale) {
    attention_body(q, kc, vc, scores, out, hq, hkv, d, start, n_max, scale);
}
extern "C" __global__ void attention_f16(const float* __restrict__ q, const __half* __restrict__ kc,
                                         const __half* __restrict__ vc, float* __restrict__ scores,
                                         float* __restrict__ out, int hq, int hkv, int d, int start,
                                         int n_max, float scale) {
    attention_body(q, kc, vc, scores, out, hq, hkv, d, start, n_max, scale);
}

// ---------------------------------------------------------------------------------------
// Fused decode step (runner.py). `ids` and `pos` are device buffers written before each
// step; everything else a step touches stays at fixed addresses.

// x[t, :] = table[ids[t], :] (float32 out); `stride` is the table's row length in elements.
// An id outside [0, vocab) (ids may come from the device) gives a row of zeros, never a
// read past the table. The step's first kernel, it also sets attn_combine_norm_quant's
// counts done[0, ndone) to 0: a step cut short (its counts left part way) cannot make
// later steps skip the norm.
template <typename TAB>
__device__ void embed_body(const TAB* __restrict__ table, const int* __restrict__ ids,
                           float* __restrict__ x, int d, int stride, int vocab,
                           int* __restrict__ done, int ndone) {
    const int id = ids[blockIdx.x];
    const bool ok = id >= 0 && id < vocab;
    const size_t row = ok ? (size_t)id * stride : 0;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        x[(size_t)blockIdx.x * d + i] = ok ? load_f(table, row + i) : 0.0f;
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < ndone; i += blockDim.x) done[i] = 0;
}
#define EMBED_ARGS(TAB)                                                                      \
    const TAB* __restrict__ table, const int* __restrict__ ids, float* __restrict__ x, int d, \
        int stride, int vocab, int* __restrict__ done, int ndone
extern "C" __global__ void embed_f16(EMBED_ARGS(__half)) {
    embed_body(table, ids, x, d, stride, vocab, done, ndone);
}
extern "C" __global__ void embed_bf16(EMBED_ARGS(bf16)) {
    embed_body(table, ids, x, d, stride, vocab, done, ndone);
}
extern "C" __global__ void embed_f32(EMBED_ARGS(float)) {
    embed_body(table, ids, x, d, stride, vocab, done, ndone);
}

// The norm kernels below keep a row in registers when it fits (row_held):
// value i in v[j] of thread i % blockDim.x, j = i / blockDim.x. Each thread then reads its
// values once, with all the loads in flight together, instead of once a pass (three
// passes of dependent loads, the latency of each: a 2560-row took 8 us, a 6912-row 21 on
// an H100). Longer rows take the loops of quantize_row. The same float operations in the
// same order either way, so the same bits.
#define NORM_BLOCK 256     // rmsnorm_quant, act_norm_quant: runner.py's NORM_THREADS
#define COMBINE_BLOCK 256  // attn_combine_norm_quant: runner.py's COMBINE_THREADS
#define ATTN_BLOCK 128     // attn_split*: at most 4 warps (runner.py's ATTN_THREADS)
#define ATTN_WARPS (ATTN_BLOCK / WARP)
#define NORM_HELD 32       // values a thread holds: rows up to 8192 in 256 threads

// Whether a row of kp int8 codes is held in registers, NORM_HELD values a thread.
__device__ __forceinline__ bool row_held(int kp) { return kp <= NORM_HELD * (int)blockDim.x; }

// quantize_row over the values this thread holds (row_held(kp)).
__device__ void quantize_held(const float (&v)[NORM_HELD], int k, int kp,
                              int8_t* __restrict__ xq, float* __restrict__ scale,
                              int* __restrict__ xsum, float* red) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_HELD; j++)
        if (threadIdx.x + j * blockDim.x < k) m = fmaxf(m, fabsf(v[j]));
    m = block_max(m, red);
    const float s = 127.0f / fmaxf(m, 1e-5f);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_HELD; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < kp) {
            int q = 0;
            if (i < k) {
                q = __float2int_rn(v[j] * s);  // round half to even, as numpy and torch
                q = max(-128, min(127, q));
            }
            xq[i] = (int8_t)q;
            acc += (float)q;
        }
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) {
        *scale = s;
        *xsum = (int)acc;
    }
}

// The second half of rmsnorm + quantize_act for one row of d values: `ss` is this thread's
// part of the sum of squares; the thread holds its values in v (held) or wrote them to
// `row` at i = threadIdx.x + j * blockDim.x. The same float operations in the same order
// as rmsnorm then quantize_act.
__device__ void norm_quant_row(float (&v)[NORM_HELD], bool held, const float* row, float ss,
                               const float* __restrict__ g, float eps, int d, int kp,
                               int8_t* __restrict__ xq, float* __restrict__ scale,
                               int* __restrict__ xsum, float* red) {
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / (float)d + eps);
    if (held) {
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < d) v[j] = v[j] * inv * g[i];
        }
        quantize_held(v, d, kp, xq, scale, xsum, red);
    } else {
        quantize_row([&](int i) { return row[i] * inv * g[i]; }, d, kp, xq, scale, xsum, red);
    }
}

// This thread's part of a row of d values value(i), i = threadIdx.x + j * blockDim.x: kept
// in v when held (all the loads first), and the sum of their squares, in that order.
template <typename Value>
__device__ float read_row(float (&v)[NORM_HELD], bool held, int d, Value value) {
    float ss = 0.0f;
    if (held) {
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++) {
            const int i = threadIdx.x + j * blockDim.x;
            v[j] = i < d ? value(i) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++)
            if (threadIdx.x + j * blockDim.x < d) ss += v[j] * v[j];
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            const float x = value(i);
            ss += x * x;
        }
    }
    return ss;
}

// quantize_act(rmsnorm(x, g)) for rows of d: one block per row.
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    rmsnorm_quant(const float* __restrict__ x, const float* __restrict__ g,
                  int8_t* __restrict__ xq, float* __restrict__ scale, int* __restrict__ xsum,
                  int d, int kp, float eps) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float* row = x + (size_t)t * d;
    const bool held = row_held(kp);
    float v[NORM_HELD];
    const float ss = read_row(v, held, d, [&](int i) { return row[i]; });
    norm_quant_row(v, held, row, ss, g, eps, d, kp, xq + (size_t)t * kp, scale + t, xsum + t,
                   red);
}

// act(a) * u: act 0 SiLU, 1 relu^2.
__device__ __forceinline__ float gated(float a, float u, int act) {
    if (act == 0) return a / (1.0f + expf(-a)) * u;
    const float r = fmaxf(a, 0.0f);
    return r * r * u;
}

// f = act(gate) * up from gu = [gate | up] (rows of 2f), then quantize_act(rmsnorm(f, g)).
// act 0: SiLU, 1: relu^2. One block per row; f is written out as scratch.
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    act_norm_quant(const float* __restrict__ gu, float* __restrict__ f,
                   const float* __restrict__ g, int8_t* __restrict__ xq,
                   float* __restrict__ scale, int* __restrict__ xsum, int n, int kp, int act,
                   float eps) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float* gate = gu + (size_t)t * 2 * n;
    float* row = f + (size_t)t * n;
    const bool held = row_held(kp);
    float v[NORM_HELD];
    const float ss = read_row(v, held, n, [&](int i) {
        const float value = gated(gate[i], gate[n + i], act);
        row[i] = value;  // the scratch copy (the loops of quantize_row read it)
        return value;
    });
    norm_quant_row(v, held, row, ss, g, eps, n, kp, xq + (size_t)t * kp, scale + t, xsum + t,
                   red);
}

// Rotate q and k of qkv [T, (hq + 2 hkv) d] at positions pos[0] + t; q goes to q_out
// [T, hq, d], k and v into the caches at those positions. One block per (t, head).
template <typename OUT>
__device__ void rope_row(const float* __restrict__ src, OUT* dst, int p, int d, int rot,
                         int style, float log2_theta) {
    const int half = rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int a = style == 0 ? i : 2 * i;
        const int b = style == 0 ? i + half : 2 * i + 1;
        const float freq = exp2f(-log2_theta * (float)(2 * i) / (float)rot);
        float sn, cs;
        sincosf((float)p * freq, &sn, &cs);
        const float xa = src[a], xb = src[b];
        store_f(dst, a, xa * cs - xb * sn);
        store_f(dst, b, xb * cs + xa * sn);
    }
    for (int e = rot + threadIdx.x; e < d; e += blockDim.x) store_f(dst, e, src[e]);
}
// Token t's q|k|v row at position p: q rotated into q_out, k rotated and v written at
// row p of the cache (kc, vc). blockIdx.y is the head of q|k|v.
template <typename KV>
__device__ void rope_store_body(const float* __restrict__ qkv, int t, int p,
                                float* __restrict__ q_out, KV* __restrict__ kc,
                                KV* __restrict__ vc, int hq, int hkv, int d, int rot, int style,
                                float log2_theta) {
    const int hh = blockIdx.y;
    const float* src = qkv + ((size_t)t * (hq + 2 * hkv) + hh) * d;
    if (hh < hq) {
        rope_row(src, q_out + ((size_t)t * hq + hh) * d, p, d, rot, style, log2_theta);
    } else if (hh < hq + hkv) {
        rope_row(src, kc + ((size_t)p * hkv + (hh - hq)) * d, p, d, rot, style, log2_theta);
    } else {
        KV* dst = vc + ((size_t)p * hkv + (hh - hq - hkv)) * d;
        for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(dst, i, src[i]);
    }
}
// One sequence: token t = blockIdx.x at position pos[0] + t.
extern "C" __global__ void rope_store(const float* __restrict__ qkv, const int* __restrict__ pos,
                                      float* __restrict__ q_out, float* __restrict__ kc,
                                      float* __restrict__ vc, int hq, int hkv, int d, int rot,
                                      int style, float log2_theta) {
    const int t = blockIdx.x;
    rope_store_body(qkv, t, pos[0] + t, q_out, kc, vc, hq, hkv, d, rot, style, log2_theta);
}
extern "C" __global__ void rope_store_f16(const float* __restrict__ qkv, const int* __restrict__ pos,
                                          float* __restrict__ q_out, __half* __restrict__ kc,
                                          __half* __restrict__ vc, int hq, int hkv, int d, int rot,
                                          int style, float log2_theta) {
    const int t = blockIdx.x;
    rope_store_body(qkv, t, pos[0] + t, q_out, kc, vc, hq, hkv, d, rot, style, log2_theta);
}
// A batched decode step: token j = blockIdx.x is sequence j's, at position pos[j], stored
// into that sequence's cache (kcs[j], vcs[j]: device addresses of its layer's K and V).
extern "C" __global__ void rope_store_seqs(const float* __restrict__ qkv,
                                           const int* __restrict__ pos, float* __restrict__ q_out,
                                           const unsigned long long* __restrict__ kcs,
                                           const unsigned long long* __restrict__ vcs, int hq,
                                           int hkv, int d, int rot, int style, float log2_theta) {
    const int j = blockIdx.x;
    rope_store_body(qkv, j, pos[j], q_out, reinterpret_cast<float*>(kcs[j]),
                    reinterpret_cast<float*>(vcs[j]), hq, hkv, d, rot, style, log2_theta);
}
extern "C" __global__ void rope_store_seqs_f16(const float* __restrict__ qkv,
                                               const int* __restrict__ pos,
                                               float* __restrict__ q_out,
                                               const unsigned long long* __restrict__ kcs,
                                               const unsigned long long* __restrict__ vcs, int hq,
                                               int hkv, int d, int rot, int style,
                                               float log2_theta) {
    const int j = blockIdx.x;
    rope_store_body(qkv, j, pos[j], q_out, reinterpret_cast<__half*>(kcs[j]),
                    reinterpret_cast<__half*>(vcs[j]), hq, hkv, d, rot, style, log2_theta);
}

// Split ("flash-decoding") attention of one query at position pos[0] over keys 0..pos[0]:
// block (h, s) of `splits` takes one contiguous chunk of the keys, each of its warps every
// 4th key of it (lanes split the head dimension: coalesced loads), with an online softmax.
// Each block writes its max, sum of exponentials and unnormalized output [d] to part_*;
// attn_combine_norm_quant merges the splits. d <= MAXD; blockDim.x a multiple of 32 up
// to ATTN_BLOCK (the runner launches 128: 4 warps; more is refused by the launch bounds).
// The current key: row `cur` of the cache read from kcur / vcur (a block's own copy)
// instead; cur < 0: every row from the cache.
template <typename KV>
struct KeyRows {
    const KV* kc;
    const KV* vc;
    const KV* kcur;
    const KV* vcur;
    int cur;
};
// Split `split` of `splits` over keys 0..n-1 for query head h (q: its d values) by
// `warps` warps of which this thread is warp wid: each warp's online softmax into
// sm / sl / sacc [warps][MAXD] (shared); attn_split_merge, after a barrier, merges them.
template <typename KV>
__device__ void attn_split_warps(const float* q, KeyRows<KV> keys, int n, int h, int split,
                                 int hq, int hkv, int d, int splits, float scale, int wid,
                                 int warps, float* sm, float* sl, float (*sacc)[MAXD]) {
    const int lane = threadIdx.x % WARP;
    const int kvh = h / (hq / hkv);
    const int chunk = (n + splits - 1) / splits;
    const int s0 = split * chunk, s1 = min(n, s0 + chunk);
    float qr[MAXD / WARP], acc[MAXD / WARP];
#pragma unroll
    for (int j = 0; j < MAXD / WARP; j++) {
        const int i = lane + j * WARP;
        qr[j] = i < d ? q[i] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -3.0e38f, l = 0.0f;
    for (int s = s0 + wid; s < s1; s += warps) {
        const bool cur = s == keys.cur;
        const KV* kr = cur ? keys.kcur : keys.kc + ((size_t)s * hkv + kvh) * d;
        const KV* vr = cur ? keys.vcur : keys.vc + ((size_t)s * hkv + kvh) * d;
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < MAXD / WARP; j++) {
            const int i = lane + j * WARP;
            if (i < d) dot += qr[j] * load_f(kr, i);
        }
        const float score = warp_sum(dot) * scale;
        const float m_new = fmaxf(m, score);
        const float corr = expf(m - m_new), e = expf(score - m_new);
        l = l * corr + e;
#pragma unroll
        for (int j = 0; j < MAXD / WARP; j++) {
            const int i = lane + j * WARP;
            if (i < d) acc[j] = acc[j] * corr + e * load_f(vr, i);
        }
        m = m_new;
    }
    if (lane == 0) sm[wid] = m, sl[wid] = l;
#pragma unroll
    for (int j = 0; j < MAXD / WARP; j++) {
        const int i = lane + j * WARP;
        if (i < d) sacc[wid][i] = acc[j];
    }
}
// The warps' results merged into part `part` (part_m, part_l, part_acc [d]) by `threads`
// threads of which this is thread tid.
__device__ void attn_split_merge(int part, int d, int warps, int tid, int threads,
                                 const float* sm, const float* sl, const float (*sacc)[MAXD],
                                 float* __restrict__ part_m, float* __restrict__ part_l,
                                 float* __restrict__ part_acc) {
    float mm = sm[0];
    for (int k = 1; k < warps; k++) mm = fmaxf(mm, sm[k]);
    float w[ATTN_WARPS];
#pragma unroll
    for (int k = 0; k < ATTN_WARPS; k++) w[k] = k < warps ? expf(sm[k] - mm) : 0.0f;
    if (tid == 0) {
        float l = sl[0] * w[0];
        for (int k = 1; k < warps; k++) l += sl[k] * w[k];
        part_m[part] = mm;
        part_l[part] = l;
    }
    for (int i = tid; i < d; i += threads) {
        float v = sacc[0][i] * w[0];
        for (int k = 1; k < warps; k++) v += sacc[k][i] * w[k];
        part_acc[(size_t)part * d + i] = v;
    }
}
template <typename KV>
__device__ void attn_split_body(const float* __restrict__ q, const KV* __restrict__ kc,
                                const KV* __restrict__ vc, int n,
                                float* __restrict__ part_m, float* __restrict__ part_l,
                                float* __restrict__ part_acc, int hq, int hkv, int d, int splits,
                                float scale) {
    __shared__ float sm[ATTN_WARPS], sl[ATTN_WARPS], sacc[ATTN_WARPS][MAXD];
    const int h = blockIdx.x, split = blockIdx.y, warps = blockDim.x / WARP;
    const KeyRows<KV> keys = {kc, vc, nullptr, nullptr, -1};
    attn_split_warps(q + (size_t)h * d, keys, n, h, split, hq, hkv, d, splits, scale,
                     (int)threadIdx.x / WARP, warps, sm, sl, sacc);
    __syncthreads();
    attn_split_merge(h * splits + split, d, warps, threadIdx.x, blockDim.x, sm, sl, sacc, part_m,
                     part_l, part_acc);
}
extern "C" __global__ void __launch_bounds__(ATTN_BLOCK) attn_split(const float* __restrict__ q, const float* __restrict__ kc,
                                      const float* __restrict__ vc, const int* __restrict__ pos,
                                      float* __restrict__ part_m, float* __restrict__ part_l,
                                      float* __restrict__ part_acc, int hq, int hkv, int d,
                                      int splits, float scale) {
    attn_split_body(q, kc, vc, pos[0] + 1, part_m, part_l, part_acc, hq, hkv, d, splits, scale);
}
extern "C" __global__ void __launch_bounds__(ATTN_BLOCK) attn_split_f16(const float* __restrict__ q, const __half* __restrict__ kc,
                                          const __half* __restrict__ vc, const int* __restrict__ pos,
                                          float* __restrict__ part_m, float* __restrict__ part_l,
                                          float* __restrict__ part_acc, int hq, int hkv, int d,
                                          int splits, float scale) {
    attn_split_body(q, kc, vc, pos[0] + 1, part_m, part_l, part_acc, hq, hkv, d, splits, scale);
}
// A batched decode step: blockIdx.z = j is sequence j (its query row, its cache kcs[j] /
// vcs[j] up to position pos[j], its block of hq * splits parts).
template <typename KV>
__device__ void attn_split_seq(const float* __restrict__ q, const unsigned long long* __restrict__ kcs,
                               const unsigned long long* __restrict__ vcs,
                               const int* __restrict__ pos, float* __restrict__ part_m,
                               float* __restrict__ part_l, float* __restrict__ part_acc, int hq,
                               int hkv, int d, int splits, float scale) {
    const int j = blockIdx.z;
    const size_t parts = (size_t)j * hq * splits;
    attn_split_body(q + (size_t)j * hq * d, reinterpret_cast<const KV*>(kcs[j]),
                    reinterpret_cast<const KV*>(vcs[j]), pos[j] + 1, part_m + parts,
                    part_l + parts, part_acc + parts * d, hq, hkv, d, splits, scale);
}
extern "C" __global__ void __launch_bounds__(ATTN_BLOCK) attn_split_seqs(const float* __restrict__ q,
                                           const unsigned long long* __restrict__ kcs,
                                           const unsigned long long* __restrict__ vcs,
                                           const int* __restrict__ pos, float* __restrict__ part_m,
                                           float* __restrict__ part_l, float* __restrict__ part_acc,
                                           int hq, int hkv, int d, int splits, float scale) {
    attn_split_seq<float>(q, kcs, vcs, pos, part_m, part_l, part_acc, hq, hkv, d, splits, scale);
}
extern "C" __global__ void __launch_bounds__(ATTN_BLOCK) attn_split_seqs_f16(const float* __restrict__ q,
                                               const unsigned long long* __restrict__ kcs,
                                               const unsigned long long* __restrict__ vcs,
                                               const int* __restrict__ pos,
                                               float* __restrict__ part_m, float* __restrict__ part_l,
                                               float* __restrict__ part_acc, int hq, int hkv, int d,
                                               int splits, float scale) {
    attn_split_seq<__half>(q, kcs, vcs, pos, part_m, part_l, part_acc, hq, hkv, d, splits, scale);
}

// One head's output out[0, d) from its splits' parts (part_m, part_l [splits], part_acc
// [splits, d]): their weights by warp 0 into weight (shared), then a thread an output.
// Every thread of the block calls it (a barrier between the weights and the outputs).
__device__ void merge_head(const float* part_m, const float* part_l, const float* part_acc,
                           float* out, int d, int splits, float* weight) {
    if (threadIdx.x < WARP) {
        const int lane = threadIdx.x;
        float mm = -3.0e38f;
        for (int s = lane; s < splits; s += WARP) mm = fmaxf(mm, part_m[s]);
        mm = warp_max(mm);
        float total = 0.0f;
        for (int s = lane; s < splits; s += WARP) total += part_l[s] * expf(part_m[s] - mm);
        total = warp_sum(total);
        for (int s = lane; s < splits; s += WARP) weight[s] = expf(part_m[s] - mm) / total;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++) v += weight[s] * part_acc[(size_t)s * d + i];
        out[i] = v;
    }
}

// Merge attn_split's parts into out [hq * d], then quantize_act(rmsnorm(out, g)). Block
// (h, j) merges head h of sequence j: its splits' weights (one warp), then its d outputs;
// the last of sequence j's hq blocks to finish (a count in done[j], set back to 0 for the
// next step) norms and quantizes the whole row. One block a sequence doing all of it read
// every part through one SM: 25 us a layer at 64 splits on an H100.
// d <= blockDim.x, splits <= MAX_SPLITS.
extern "C" __global__ void __launch_bounds__(COMBINE_BLOCK)
    attn_combine_norm_quant(const float* __restrict__ part_m, const float* __restrict__ part_l,
                            const float* __restrict__ part_acc, float* __restrict__ out,
                            const float* __restrict__ g, int8_t* __restrict__ xq,
                            float* __restrict__ scale, int* __restrict__ xsum,
                            int* __restrict__ done, int hq, int d, int splits, int kp,
                            float eps) {
    __shared__ float red[32];
    __shared__ float weight[MAX_SPLITS];  // exp(m_s - max) / sum over this head's splits
    __shared__ int last;
    const int h = blockIdx.x;
    const size_t j = blockIdx.y, head = j * hq + h;
    out += j * hq * d;
    merge_head(part_m + head * splits, part_l + head * splits, part_acc + head * splits * d,
               out + h * d, d, splits, weight);
    __threadfence();  // this block's outputs are visible before its count is
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done + j, 1) == hq - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x == 0) done[j] = 0;
    // the whole row, other blocks' outputs too (read through L2: __ldcg)
    const int dim = hq * d;
    const bool held = row_held(kp);
    float v[NORM_HELD];
    const float ss = read_row(v, held, dim, [&](int e) { return __ldcg(out + e); });
    norm_quant_row(v, held, out, ss, g, eps, dim, kp, xq + j * kp, scale + j, xsum + j, red);
}

// ---------------------------------------------------------------------------------------
// One token's decode layer in four launches (runner.py, BITNET_CUDA_LAYER):
//
//   qkv_attend     norm + int8 of x, q|k|v rows of one query head and its kv head, rope,
//                  K/V store, the attention's splits then their merge -> att
//   norm_gemv_add  norm + int8 of att (attn_sub_norm), o rows, x += o
//   norm_gemv_act  norm + int8 of x (ffn_norm), gate and up rows, f = act(gate) * up
//   norm_gemv_add  norm + int8 of f (ffn_sub_norm), down rows, x += down
//
// A launch boundary stays only where a block needs what every block of the launch before
// made (each GEMV row reads the whole input): every block norms and quantizes the whole
// input itself, into shared memory. A qkv_attend block computes its head's q rows and its
// kv head's k and v rows (a kv group's heads each compute them; the first stores them in
// the cache) and reads the current key from its own shared copy, never the cache row
// being written. Bit for bit the ten kernels above: the same device functions with the
// same block sizes (read_row, norm_quant_row with NORM_BLOCK threads, i2s_value, rope_row,
// attn_split_warps / attn_split_merge with ATTN_BLOCK threads a split, merge_head), and
// the int32 dot products are exact in any order.
#define LAYER_MAX_KP 16384  // longest int8 input row (runner.py's LAYER_MAX_KP)
#define LAYER_WARPS (NORM_BLOCK / WARP)

// The norm prologue: quantize_act(rmsnorm(x, g)) of the row x [d] into the block's shared
// xq [kp], scale and xsum, as rmsnorm_quant does it; every thread may read them after.
__device__ void norm_quant_shared(const float* __restrict__ x, const float* __restrict__ g,
                                  int d, int kp, float eps, int8_t* xq, float* scale, int* xsum,
                                  float* red) {
    const bool held = row_held(kp);
    float v[NORM_HELD];
    const float ss = read_row(v, held, d, [&](int i) { return x[i]; });
    norm_quant_row(v, held, x, ss, g, eps, d, kp, xq, scale, xsum, red);
    __syncthreads();  // thread 0's scale and sum (the codes were ordered by block_sum)
}

// The int32 dot of weight row wrow (kw4 uint4 words) with the shared int8 row xq (kw4 * 4
// int4s), summed over the warp: every lane gets it. matmul_i2s_body's loads and dp4a.
__device__ __forceinline__ int i2s_dot_shared(const uint4* __restrict__ wrow, const int4* xq,
                                              int kw4, int lane) {
    int a = 0;
    for (int gi = lane; gi < kw4; gi += WARP) {
        const uint4 wv = __ldg(wrow + gi);
        const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int4 xv = xq[gi * 4 + q];
            const uint32_t word = words[q];
            a = __dp4a(xv.x, (int)(word & 0x03030303u), a);
            a = __dp4a(xv.y, (int)((word >> 2) & 0x03030303u), a);
            a = __dp4a(xv.z, (int)((word >> 4) & 0x03030303u), a);
            a = __dp4a(xv.w, (int)((word >> 6) & 0x03030303u), a);
        }
    }
    return warp_sum_i(a);
}

// y[r] (+)= rows r of w (ternary [n, kw4 * 16]) times quantize_act(rmsnorm(xin, g)): the o
// and down projections with the residual add. Block b: rows b * rows .. + rows, a warp a
// row at a time. xin [k], k <= kw4 * 64 <= LAYER_MAX_KP.
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    norm_gemv_add(const float* __restrict__ xin, const float* __restrict__ g,
                  const uint4* __restrict__ w, const float* __restrict__ wscale, float* y, int n,
                  int k, int kw4, int rows, float eps) {
    __shared__ int4 xq[LAYER_MAX_KP / 16];
    __shared__ float red[32], xscale;
    __shared__ int xsum;
    norm_quant_shared(xin, g, k, kw4 * 64, eps, reinterpret_cast<int8_t*>(xq), &xscale, &xsum,
                      red);
    const int lane = threadIdx.x % WARP, r1 = min(n, (int)(blockIdx.x + 1) * rows);
    for (int row = blockIdx.x * rows + threadIdx.x / WARP; row < r1; row += LAYER_WARPS) {
        const int dot = i2s_dot_shared(w + (size_t)row * kw4, xq, kw4, lane);
        if (lane == 0) y[row] = y[row] + i2s_value(dot, xsum, wscale[row], xscale);
    }
}

// f[r] = act(gate[r]) * up[r] (act 0 SiLU, 1 relu^2) with gate | up = w ([2 nf, kw4 * 16])
// times quantize_act(rmsnorm(xin, g)): rows r and nf + r; as act_norm_quant's values.
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    norm_gemv_act(const float* __restrict__ xin, const float* __restrict__ g,
                  const uint4* __restrict__ w, const float* __restrict__ wscale,
                  float* __restrict__ f, int nf, int k, int kw4, int rows, int act, float eps) {
    __shared__ int4 xq[LAYER_MAX_KP / 16];
    __shared__ float red[32], xscale;
    __shared__ int xsum;
    norm_quant_shared(xin, g, k, kw4 * 64, eps, reinterpret_cast<int8_t*>(xq), &xscale, &xsum,
                      red);
    const int lane = threadIdx.x % WARP, r1 = min(nf, (int)(blockIdx.x + 1) * rows);
    for (int row = blockIdx.x * rows + threadIdx.x / WARP; row < r1; row += LAYER_WARPS) {
        const int dg = i2s_dot_shared(w + (size_t)row * kw4, xq, kw4, lane);
        const int du = i2s_dot_shared(w + (size_t)(nf + row) * kw4, xq, kw4, lane);
        if (lane == 0) {
            const float gate = i2s_value(dg, xsum, wscale[row], xscale);
            const float up = i2s_value(du, xsum, wscale[nf + row], xscale);
            f[row] = gated(gate, up, act);
        }
    }
}

// Block h (query head h, kv head kvh = h / (hq / hkv)) of one token at position pos[0]:
// quantize_act(rmsnorm(x, g)), the rows of q head h, k head kvh and v head kvh of
// w = q|k|v, q and k rotated (rope_row), k and v stored at row pos of the caches
// [*, hkv, d] by the kv group's first head, then the `splits` splits of the keys
// 0..pos (two at a time: warps 0-3 and 4-7, as attn_split's blocks of ATTN_BLOCK
// threads) into parts [hq, splits] of part_m, part_l, part_acc, merged into att [hq * d].
template <typename KV>
__device__ void qkv_attend_body(const float* __restrict__ x, const float* __restrict__ g,
                                const uint4* __restrict__ w, const float* __restrict__ wscale,
                                int k, int kw4, const int* __restrict__ pos, KV* kc, KV* vc,
                                float* __restrict__ part_m, float* __restrict__ part_l,
                                float* __restrict__ part_acc, float* __restrict__ att, int hq,
                                int hkv, int d, int rot, int style, float log2_theta, int splits,
                                float scale, float eps) {
    constexpr int GROUPS = NORM_BLOCK / ATTN_BLOCK;  // splits computed at once
    __shared__ int4 xq[LAYER_MAX_KP / 16];
    __shared__ float red[32], xscale;
    __shared__ int xsum;
    __shared__ float hv[3 * MAXD], qv[MAXD];  // the head's q | k | v rows; q rotated
    __shared__ KV kcur[MAXD], vcur[MAXD];     // the current key and value, as stored
    __shared__ float sm[GROUPS][ATTN_WARPS], sl[GROUPS][ATTN_WARPS];
    __shared__ float sacc[GROUPS][ATTN_WARPS][MAXD];
    __shared__ float weight[MAX_SPLITS];
    const int h = blockIdx.x, kvh = h / (hq / hkv), lane = threadIdx.x % WARP;
    norm_quant_shared(x, g, k, kw4 * 64, eps, reinterpret_cast<int8_t*>(xq), &xscale, &xsum,
                      red);
    for (int i = threadIdx.x / WARP; i < 3 * d; i += LAYER_WARPS) {
        const int part = i / d, e = i - part * d;
        const int row = (part == 0 ? h : hq + (part - 1) * hkv + kvh) * d + e;
        const int dot = i2s_dot_shared(w + (size_t)row * kw4, xq, kw4, lane);
        if (lane == 0) hv[i] = i2s_value(dot, xsum, wscale[row], xscale);
    }
    __syncthreads();
    const int p = pos[0];
    rope_row(hv, qv, p, d, rot, style, log2_theta);
    rope_row(hv + d, kcur, p, d, rot, style, log2_theta);
    for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(vcur, i, hv[2 * d + i]);
    if (h % (hq / hkv) == 0) {  // the kv group's first head stores its key and value
        const size_t row = ((size_t)p * hkv + kvh) * d;
        rope_row(hv + d, kc + row, p, d, rot, style, log2_theta);
        for (int i = threadIdx.x; i < d; i += blockDim.x) store_f(vc, row + i, hv[2 * d + i]);
    }
    __syncthreads();
    const KeyRows<KV> keys = {kc, vc, kcur, vcur, p};
    const int group = threadIdx.x / ATTN_BLOCK, tid = threadIdx.x % ATTN_BLOCK;
    for (int s0 = 0; s0 < splits; s0 += GROUPS) {
        const int split = s0 + group;
        if (split < splits)  // (whole groups of warps)
            attn_split_warps(qv, keys, p + 1, h, split, hq, hkv, d, splits, scale,
                             tid / WARP, ATTN_WARPS, sm[group], sl[group], sacc[group]);
        __syncthreads();
        if (split < splits)
            attn_split_merge(h * splits + split, d, ATTN_WARPS, tid, ATTN_BLOCK, sm[group],
                             sl[group], sacc[group], part_m, part_l, part_acc);
        __syncthreads();  // the parts written; sm, sl, sacc free again
    }
    merge_head(part_m + (size_t)h * splits, part_l + (size_t)h * splits,
               part_acc + (size_t)h * splits * d, att + (size_t)h * d, d, splits, weight);
}
// (entry points written out: the emulator reads which pointers a kernel writes)
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    qkv_attend(const float* __restrict__ x, const float* __restrict__ g, const uint4* __restrict__ w,
               const float* __restrict__ wscale, int k, int kw4, const int* __restrict__ pos,
               float* kc, float* vc, float* __restrict__ part_m, float* __restrict__ part_l,
               float* __restrict__ part_acc, float* __restrict__ att, int hq, int hkv, int d,
               int rot, int style, float log2_theta, int splits, float scale, float eps) {
    qkv_attend_body(x, g, w, wscale, k, kw4, pos, kc, vc, part_m, part_l, part_acc, att, hq, hkv,
                    d, rot, style, log2_theta, splits, scale, eps);
}
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    qkv_attend_f16(const float* __restrict__ x, const float* __restrict__ g, const uint4* __restrict__ w,
                   const float* __restrict__ wscale, int k, int kw4, const int* __restrict__ pos,
                   __half* kc, __half* vc, float* __restrict__ part_m, float* __restrict__ part_l,
                   float* __restrict__ part_acc, float* __restrict__ att, int hq, int hkv, int d,
                   int rot, int style, float log2_theta, int splits, float scale, float eps) {
    qkv_attend_body(x, g, w, wscale, k, kw4, pos, kc, vc, part_m, part_l, part_acc, att, hq, hkv,
                    d, rot, style, log2_theta, splits, scale, eps);
}

// Greedy decoding on the device, the last kernel of a step: ids[0] = argmax(logits[:vocab])
// (the lowest index among equal maxima, as numpy's argmax; NaN never wins), ring[slot] =
// it and pos[0] += 1, so the next step (in the same graph) reads its input here.
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    argmax_next(const float* __restrict__ logits, int vocab, int* __restrict__ ids,
                int* __restrict__ pos, int* __restrict__ ring, int slot) {
    __shared__ float best_v[NORM_BLOCK / WARP];
    __shared__ int best_i[NORM_BLOCK / WARP];
    float v = __uint_as_float(0xff800000u);  // -inf
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float x = logits[i];
        if (x > v || (x == v && i < idx)) v = x, idx = i;
    }
    for (int o = WARP / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
    }
    if (threadIdx.x % WARP == 0) best_v[threadIdx.x / WARP] = v, best_i[threadIdx.x / WARP] = idx;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / WARP); w++)
            if (best_v[w] > v || (best_v[w] == v && best_i[w] < idx)) v = best_v[w], idx = best_i[w];
        if (idx >= vocab) idx = 0;  // every logit NaN or -inf
        ids[0] = idx;
        ring[slot] = idx;
        pos[0] += 1;
    }
}

// Seeded sampling on the device, the last kernel of a step (as argmax_next): the token is
// drawn from softmax(logits / T) after top-k (ties at the k-th value kept), top-p (the
// largest probabilities whose mass reaches top_p, ties at the cut kept) and min-p (p >=
// min_p * max p), the filters of the host's token_probabilities; the draw is the first
// token whose cumulative probability passes u, u from (seed, pos[0]). Thresholds are
// found by bisection over the row (no sort), the kept mass by chunks a thread.
__device__ __forceinline__ float uniform01(unsigned long long seed, int p) {
    unsigned long long z = seed ^ ((unsigned long long)(unsigned)p * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
}
extern "C" __global__ void __launch_bounds__(NORM_BLOCK)
    sample_next(const float* __restrict__ logits, int vocab, float inv_temp, int top_k,
                float top_p, float min_p, unsigned seed_lo, unsigned seed_hi,
                int* __restrict__ ids, int* __restrict__ pos, int* __restrict__ ring, int slot) {
    __shared__ float red[32];
    __shared__ float part[NORM_BLOCK];
    __shared__ int owner;
    const float big = 3.0e38f;
    float hi = -big, lo = big;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float x = logits[i];
        if (fabsf(x) <= big) hi = fmaxf(hi, x), lo = fminf(lo, x);  // finite only
    }
    hi = block_max(hi, red);
    lo = -block_max(-lo, red);
    float kth = lo;  // top-k: the k-th largest value (the largest t with k values >= t)
    if (top_k > 0 && top_k < vocab) {
        float a = lo, b = hi;
        for (int it = 0; it < 48 && a < b; it++) {
            const float mid = a + (b - a) * 0.5f;
            if (mid <= a || mid >= b) break;
            float c = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) c += logits[i] >= mid ? 1.0f : 0.0f;
            if (block_sum(c, red) >= (float)top_k) a = mid;
            else b = mid;
        }
        float m = big;  // the smallest value >= a: exactly the k-th
        for (int i = threadIdx.x; i < vocab; i += blockDim.x)
            if (logits[i] >= a) m = fminf(m, logits[i]);
        kth = -block_max(-m, red);
    }
    // weights w = exp((x - max) / T) of the kept tokens: the largest is 1
#define SAMPLE_W(x) (((x) >= kth && fabsf(x) <= big) ? expf(((x) - hi) * inv_temp) : 0.0f)
    float total = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) total += SAMPLE_W(logits[i]);
    total = block_sum(total, red);
    float cut = min_p;  // keep w >= cut (min-p: p >= min_p * max p, max w = 1)
    if (top_p < 1.0f) {  // the largest t whose kept mass sum(w >= t) reaches top_p
        float a = 0.0f, b = 1.0f;
        for (int it = 0; it < 48; it++) {
            const float mid = a + (b - a) * 0.5f;
            if (mid <= a || mid >= b) break;
            float s = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
                const float w = SAMPLE_W(logits[i]);
                s += w >= mid ? w : 0.0f;
            }
            if (block_sum(s, red) >= top_p * total) a = mid;
            else b = mid;
        }
        float m = 2.0f;  // the smallest weight >= a: the cut exactly
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float w = SAMPLE_W(logits[i]);
            if (w >= a && w > 0.0f) m = fminf(m, w);
        }
        cut = fmaxf(cut, -block_max(-m, red));
    }
    // the draw: chunks of consecutive tokens a thread, their kept mass, the owner of u
    const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
    const int i0 = threadIdx.x * chunk, i1 = min(vocab, i0 + chunk);
    float s = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float w = SAMPLE_W(logits[i]);
        s += w >= cut && w > 0.0f ? w : 0.0f;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float run = 0.0f;
        for (int t = 0; t < (int)blockDim.x; t++) run += part[t];
        const unsigned long long seed = ((unsigned long long)seed_hi << 32) | seed_lo;
        const float target = uniform01(seed, pos[0]) * run;
        float acc = 0.0f;
        int who = -1;
        for (int t = 0; t < (int)blockDim.x; t++) {
            if (part[t] > 0.0f) who = t;  // the last with mass, should rounding pass them all
            if (part[t] > 0.0f && acc + part[t] > target) break;
            acc += part[t];
        }
        owner = who;
        red[0] = target - acc;  // what is left of u in the owner's chunk
    }
    __syncthreads();
    if ((int)threadIdx.x == owner) {
        const float left = red[0];
        float acc = 0.0f;
        int tok = -1;
        for (int i = i0; i < i1; i++) {
            const float w = SAMPLE_W(logits[i]);
            if (!(w >= cut && w > 0.0f)) continue;
            tok = i;
            acc += w;
            if (acc > left) break;
        }
        ids[0] = tok;
        ring[slot] = tok;
        pos[0] += 1;
    }
    if (owner < 0 && threadIdx.x == 0) {  // every logit NaN or infinite
        ids[0] = 0;
        ring[slot] = 0;
        pos[0] += 1;
    }
#undef SAMPLE_W
}
