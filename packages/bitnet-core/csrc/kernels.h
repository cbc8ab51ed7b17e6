// The SIMD kernel tables of the CPU providers.
//
// Each instruction set has its own translation unit (kernels_scalar.cpp,
// kernels_avx2.cpp, kernels_avx512.cpp, kernels_neon.cpp, kernels_neon_dotprod.cpp) that includes
// kernels_isa.inc under its own -m flags and returns a KernelTable. Every
// kernel works on a range of rows / items so that the caller (ops.cpp) can
// split it over the thread pool; kernels never allocate Python objects and
// share no inline templates with other translation units.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace bitnet {

// Ternary weights in the "i2_128" layout (docs/CPU_KERNELS.md): each row is
// kp / 128 blocks of 32 bytes; byte j of a block holds the codes u = w + 1 of
// columns 32*i + j (i = 0..3) in bits 2i..2i+1. Padding columns hold u = 1 (w = 0).
constexpr int64_t kI2Block = 128;
// Ternary weights in the "tq1_160" layout: each row is kp / 160 blocks of 32
// bytes; byte j holds the five codes u_i (columns 32*i + j, i = 0..4) as
// q = ceil(256 * (sum_i u_i * 3^(4-i)) / 243), so digit i is ((q * 3^i mod 256) * 3) >> 8.
constexpr int64_t kTQ1Block = 160;
// Activations are padded to a multiple of this (the lcm of the block sizes
// above is 640; the kernels pad per layout, see ops.cpp).

struct TernaryArgs {
    const uint8_t *w;       // packed rows
    int64_t row_bytes;      // bytes per packed row
    const float *wscale;    // [N]
    int64_t kp;             // padded K: multiple of the layout's block
    const int8_t *xq;       // [T, x_stride] int8 activations, zero padded to kp
    int64_t x_stride;
    const int32_t *xsum;    // [T] sum of xq over k
    const float *xs;        // [T] activation scales
    int64_t T;
    float *y;               // [T, y_stride]
    int64_t y_stride;
    bool tq2;               // i2 blocks inside llama.cpp TQ2_0 blocks (see i2_block)
    // xq in pairs order (KernelTable::pair_activations), for tables that have it;
    // nullptr: the kernel makes its own copy
    const int8_t *xq_pairs = nullptr;
};

// bytes a token takes in pairs order: x_stride's whole i2 blocks, rounded up to a pair
constexpr int64_t pairs_stride(int64_t x_stride) { return (x_stride / kI2Block + 1) / 2 * 2 * kI2Block; }

// Address of 32-byte i2 block b of a row: i2_128 packs them back to back;
// llama.cpp's TQ2_0 stores two of them (qs[64]) then an f16 scale per 66 bytes,
// with the very same bit layout, so the kernels run on the file's bytes.
constexpr int64_t kTQ2BlockBytes = 66;
inline const uint8_t *i2_block(const uint8_t *row, int64_t b, bool tq2) {
    return tq2 ? row + (b >> 1) * kTQ2BlockBytes + (b & 1) * 32 : row + b * 32;
}

struct DenseArgs {
    const void *w;          // [N, w_stride] float16 bits, float32 or int8 (see kernel)
    int64_t w_stride;       // elements per row
    int64_t K;
    const float *x;         // [T, x_stride] float32 (f16/f32 kernels)
    const int8_t *xq;       // [T, x_stride] int8 (i8 kernel, zero padded to w_stride)
    int64_t x_stride;
    const float *xs;        // [T] activation scales (i8 kernel)
    const int32_t *xsum;    // [T] sums of xq over w_stride (i8 kernel)
    const float *wscale;    // [N] row scales (i8 kernel)
    int64_t T;
    float *y;               // [T, y_stride]
    int64_t y_stride;
};

struct AttentionArgs {
    const float *q;         // [T, Hq, D]
    const void *k;          // [S, Hkv, D] float32, or float16 bits (kv_f16)
    const void *v;          // [S, Hkv, D] likewise
    float *out;             // [T, Hq, D]
    int64_t T, Hq, Hkv, D, start;
    float scale;
    bool kv_f16;
    // > 0: query t sees only the last `window` positions, start + t - window + 1 ..
    // start + t (a sliding-window layer); 0: every position up to its own
    int64_t window = 0;
};

// cache rows per chunk of split (flash-decoding) attention: small enough that
// short contexts still give every thread a few chunks
constexpr int64_t kAttnChunk = 32;

// Prompt attention (T > 1) works on blocks of kAttnQueries consecutive query
// tokens of one head, so each K and V row read serves the whole block. Its
// items are head-major: item i is head i / attn_query_blocks(T), tokens from
// (i % attn_query_blocks(T)) * kAttnQueries, so a run of items reads one
// head's rows.
constexpr int64_t kAttnQueries = 4;
inline int64_t attn_query_blocks(int64_t T) { return (T + kAttnQueries - 1) / kAttnQueries; }

// the first cache row query t of `a` sees (0 without a window)
inline int64_t attn_first_row(const AttentionArgs &a, int64_t t) {
    return a.window > 0 ? std::max<int64_t>(0, a.start + t + 1 - a.window) : 0;
}

struct KernelTable {
    const char *name;
    // y[t, r] for rows [r0, r1) and every token t
    void (*ternary_i2)(const TernaryArgs &a, int64_t r0, int64_t r1);
    // nullptr, or the activation order this table's ternary_i2 reads for T > 1 (the
    // 512-bit kernels: plane d of i2 blocks 2p and 2p + 1 side by side), made from
    // xq [T, x_stride] into out [T, pairs_stride(x_stride)]; callers that run many
    // row ranges of one input make it once and pass it as TernaryArgs::xq_pairs
    void (*pair_activations)(const int8_t *xq, int64_t x_stride, int64_t T, int8_t *out);
    void (*ternary_tq1)(const TernaryArgs &a, int64_t r0, int64_t r1);
    // per-token absmax int8 quantization of rows [t0, t1) of x [T, K] into
    // xq [T, kp] (zero padded), scales s [T] and sums [T]
    void (*quantize_rows)(const float *x, int64_t K, int64_t kp, int8_t *xq, float *s,
                          int32_t *sum, int64_t t0, int64_t t1);
    // y[t, r] = sum_k x[t, k] * w[r, k] for rows [r0, r1)
    void (*dense_f16)(const DenseArgs &a, int64_t r0, int64_t r1);
    void (*dense_f32)(const DenseArgs &a, int64_t r0, int64_t r1);
    // y[t, r] = (sum_k xq[t, k] * w8[r, k]) * wscale[r] / xs[t]; w_stride % 32 == 0
    void (*dense_i8)(const DenseArgs &a, int64_t r0, int64_t r1);
    // items [i0, i1) of Hq * attn_query_blocks(T) (head, query block) pairs
    void (*attention)(const AttentionArgs &a, int64_t i0, int64_t i1);
    // decode (T = 1) split over the cache: chunk c covers rows [c * kAttnChunk,
    // min(start + 1, (c + 1) * kAttnChunk)) and writes, for every query head h,
    // part[(c * Hq + h) * (D + 2) ...] = {max score m, sum of exp(s - m), sum of exp(s - m) v}
    void (*attention_chunks)(const AttentionArgs &a, float *part, int64_t c0, int64_t c1);
    // out[i] = silu(g[i]) * u[i] / relu(g[i])^2 * u[i] for i in [i0, i1)
    void (*silu_mul)(const float *g, const float *u, float *out, int64_t i0, int64_t i1);
    void (*relu2_mul)(const float *g, const float *u, float *out, int64_t i0, int64_t i1);
    // out[i] = float16 bits of x[i], rounded to nearest even (as numpy's astype)
    void (*to_f16)(const float *x, uint16_t *out, int64_t n);
    // sum of n bytes: reads memory as fast as a core can (the bandwidth probe)
    uint64_t (*sum_bytes)(const uint8_t *p, int64_t n);
};

const KernelTable *kernels_scalar();
const KernelTable *kernels_avx2();    // nullptr where not compiled in
const KernelTable *kernels_avx512();  // nullptr where not compiled in
// arm64: the +dotprod (SDOT) build where the CPU has it, else baseline NEON;
// nullptr where not compiled in
const KernelTable *kernels_neon();
const KernelTable *kernels_neon_dotprod();  // the +dotprod build alone (nullptr where not compiled in)
bool cpu_has_dotprod();                     // arm64 SDOT, checked at run time; false elsewhere

}  // namespace bitnet
