// The CPU ops on raw host memory: one instruction set's kernel table plus a
// thread count. Both the per-op bindings (`Kernels`, ops.cpp) and the fused
// model (`CpuModel`, model.cpp) run through this class, so the two compute
// the very same numbers. No Python here: callers release the GIL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels.h"
#include "tensors.h"

namespace bitnet {

// The kernel table of an instruction set ("scalar", "avx2", "avx512", "neon");
// std::invalid_argument if it is not compiled in or the CPU lacks a feature.
const KernelTable *kernel_table(const std::string &isa);

// cos and sin of pos[t] * theta^(-2i / rot_dim), i < rot_dim / 2, for T tokens (float64)
struct RopeTable {
    RopeTable(const int64_t *pos, int64_t T, double theta, int64_t rot_dim);
    int64_t half;                // rot_dim / 2
    std::vector<double> cs, sn;  // [T, half]
};

// Where a float table's rows come from when not from memory: read(ctx, r, buf)
// returns row r's bytes (the table's float16 bits or float32), read into buf (one
// row's bytes, e.g. with pread) or found elsewhere.
struct RowSource {
    const void *(*read)(const void *ctx, int64_t row, void *buf);
    const void *ctx;
};

// One output of a ternary matmul: y [T, w->rows] = x W^T.
struct TernaryOut {
    const TernaryMatrix *w;
    float *y;
};

class Compute {
  public:
    Compute(const KernelTable *k, int threads);

    const KernelTable *table() const { return k_; }
    int threads() const { return threads_; }

    // per-token absmax int8 quantization of x [T, K] into xq [T, kp] (zero
    // padded to kp), scales xs [T] and code sums [T]
    void quantize(const float *x, int64_t T, int64_t K, int64_t kp, int8_t *xq, float *xs,
                  int32_t *sum) const;

    // y_i = xq W_i^T for every output, in one parallel job (the matrices
    // share the quantized input: q/k/v, gate/up). xq has x_stride >= every
    // matrix's padded kp and is zero beyond K.
    void ternary(const TernaryOut *outs, int n, const int8_t *xq, int64_t x_stride, const float *xs,
                 const int32_t *sum, int64_t T) const;

    // y [T, N] = x [T, K] w^T for a float16 (bits) or float32 table w [N, K]
    void dense(const void *w, bool f16, int64_t N, int64_t K, const float *x, int64_t T, float *y) const;

    // y [T, rows] = x [T, cols] d^T on the int8 table; xq holds T * d.stride bytes of scratch
    void dense_i8(const DenseI8 &d, const float *x, int64_t T, float *y, int8_t *xq, float *xs,
                  int32_t *sum) const;

    // y as dense_i8 gives it, then, for each token, every row that could hold its
    // largest logit recomputed on the float table w (float16 bits or float32,
    // [d.rows, d.cols], the table d was made from) exactly as dense() computes it:
    // the argmax of each token's logits is the exact head's, and so is every
    // logit near the top; the other rows keep the int8 head's value (within the
    // bound below of the exact one). Returns how many (token, row) logits it recomputed.
    // With `rows`, the float rows come from it (as float32: the same sums) instead of w.
    int64_t dense_i8_checked(const DenseI8 &d, const void *w, bool f16, const float *x, int64_t T, float *y,
                             int8_t *xq, float *xs, int32_t *sum, const RowSource *rows = nullptr) const;

    // causal grouped-query attention of q [T, Hq, D] over k/v [S, Hkv, D] at `start`
    void attention(const AttentionArgs &a) const;

    // n one-token attentions (each its own cache and start: the decode tokens of a
    // batched step) in one job over the pool; each equals attention(a[i]) (a window:
    // over the cache from the window's first row)
    void attention_decode_many(const AttentionArgs *a, int64_t n) const;

    // sum of n bytes read by all threads, in chunks of 1 MB (the bandwidth probe)
    uint64_t sum_bytes(const uint8_t *p, int64_t n) const;

    // float16 bits of x [n], rounded to nearest even (a float16 KV cache)
    void to_f16(const float *x, uint16_t *out, int64_t n) const { k_->to_f16(x, out, n); }

    // out = act(g) * u: silu(g), relu(g)^2 or gelu_tanh(g) (in float64), rows x K
    // elements; row by row, so a row's values do not depend on how many rows share the call
    enum class Activation { kSilu, kRelu2, kGelu };
    void gated(Activation act, const float *g, const float *u, float *out, int64_t rows, int64_t K) const;

    // The ops below are a single pass over a few KB per token, in float64 as
    // the reference: one thread for a few tokens, the pool for more.
    // y [T, K] = x / rms(x) * w (y may be x)
    void rmsnorm(const float *x, const float *w, int64_t T, int64_t K, double eps, float *y) const;
    // rotary embedding of x [T, H, D] in place, with the angles of `table` (its T
    // tokens; one table serves q and k of every layer of a forward pass)
    void rope(float *x, int64_t T, int64_t H, int64_t D, const RopeTable &table, bool neox) const;

  private:

    template <typename Args, void (*(KernelTable::*Member))(const Args &, int64_t, int64_t)>
    void run_rows(const Args &a, int64_t n, int64_t grain) const;

    const KernelTable *k_;
    int threads_;
};

}  // namespace bitnet
