// See compute.h.
#include "compute.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "threadpool.h"

namespace bitnet {

namespace {

template <typename Args, void (*(KernelTable::*Member))(const Args &, int64_t, int64_t)>
struct Job {
    const KernelTable *k;
    const Args *a;
    static void run(void *ctx, int64_t b, int64_t e) {
        auto *j = static_cast<Job *>(ctx);
        (j->k->*Member)(*j->a, b, e);
    }
};

// a few chunks per thread, so a descheduled thread does not stall the others
int64_t chunk(int64_t n, int threads, int64_t grain) {
    return std::max<int64_t>(grain, n / (threads * 8) / grain * grain);
}

constexpr int kMaxOuts = 8;
constexpr int64_t kChunk = 1 << 20;  // bytes per work item of sum_bytes

struct TernaryJob {
    const KernelTable *k;
    TernaryArgs args[kMaxOuts];
    bool i2[kMaxOuts];
    int64_t first[kMaxOuts + 1];  // global row where output i starts
    int n;

    static void run(void *ctx, int64_t b, int64_t e) {
        auto *j = static_cast<TernaryJob *>(ctx);
        for (int i = 0; i < j->n && b < e; ++i) {
            const int64_t lo = std::max(b, j->first[i]), hi = std::min(e, j->first[i + 1]);
            if (lo >= hi) continue;
            const int64_t r0 = lo - j->first[i], r1 = hi - j->first[i];
            if (j->i2[i]) j->k->ternary_i2(j->args[i], r0, r1);
            else j->k->ternary_tq1(j->args[i], r0, r1);
        }
    }
};

}  // namespace

Compute::Compute(const KernelTable *k, int threads) : k_(k), threads_(threads) {
    if (!k_) throw std::invalid_argument("no kernel table");
    if (threads_ <= 0) threads_ = default_threads();
}

template <typename Args, void (*(KernelTable::*Member))(const Args &, int64_t, int64_t)>
void Compute::run_rows(const Args &a, int64_t n, int64_t grain) const {
    Job<Args, Member> job{k_, &a};
    parallel_for(n, chunk(n, threads_, grain), threads_, &Job<Args, Member>::run, &job);
}

void Compute::quantize(const float *x, int64_t T, int64_t K, int64_t kp, int8_t *xq, float *xs,
                       int32_t *sum) const {
    if (T < 8) {
        k_->quantize_rows(x, K, kp, xq, xs, sum, 0, T);
        return;
    }
    struct Ctx {
        const KernelTable *k;
        const float *x;
        int64_t K, kp;
        int8_t *xq;
        float *xs;
        int32_t *sum;
    } ctx{k_, x, K, kp, xq, xs, sum};
    parallel_for(T, 4, threads_, [](void *c, int64_t t0, int64_t t1) {
        auto *p = static_cast<Ctx *>(c);
        p->k->quantize_rows(p->x, p->K, p->kp, p->xq, p->xs, p->sum, t0, t1);
    }, &ctx);
}

void Compute::ternary(const TernaryOut *outs, int n, const int8_t *xq, int64_t x_stride,
                      const float *xs, const int32_t *sum, int64_t T) const {
    if (n < 1 || n > kMaxOuts) throw std::invalid_argument("ternary: 1 to 8 outputs");
    TernaryJob job;
    job.k = k_;
    job.n = n;
    job.first[0] = 0;
    for (int i = 0; i < n; ++i) {
        const TernaryMatrix &w = *outs[i].w;
        job.args[i] = TernaryArgs{w.ptr, w.row_bytes, w.scales.data(), w.kp, xq, x_stride, sum,
                                  xs, T, outs[i].y, w.rows, w.tq2()};
        job.i2[i] = w.i2_blocks();
        job.first[i + 1] = job.first[i] + w.rows;
    }
    const int64_t rows = job.first[n];
    if (k_->pair_activations && T > 1) {
        // once for every row range of the job (the kernels would each make a copy;
        // one token goes to a GEMV that reads xq)
        thread_local std::vector<int8_t> pairs;
        pairs.resize(static_cast<size_t>(T * pairs_stride(x_stride)));
        k_->pair_activations(xq, x_stride, T, pairs.data());
        for (int i = 0; i < n; ++i) job.args[i].xq_pairs = pairs.data();
    }
    // prefill chunks are long (every token of the sub-batch): more of them, less
    // waiting for the last one. Up to 16 tokens (the server's batched steps) a
    // chunk is short, and 4x as many cost more in claims and cold prefetch
    // starts than they save: 8 tokens, 2 threads, 1536x1536 -16%. Decode (one
    // token): one chunk a thread, so each thread streams one run of rows. With
    // 8 chunks a thread the model's decode was 10% slower (2 threads, Zen 4),
    // and 5-10% slower beside a busy process too: the claims stay dynamic, so a
    // thread that is done takes the chunk a late one has not claimed
    // (docs/CPU_KERNELS.md)
    const int64_t per_thread = (rows + threads_ - 1) / threads_;
    const int64_t grain = T == 1 ? std::max<int64_t>(16, (per_thread + 15) / 16 * 16)
                                 : chunk(rows, T > 16 ? threads_ * 4 : threads_, 16);
    parallel_for(rows, grain, threads_, &TernaryJob::run, &job);
}

uint64_t Compute::sum_bytes(const uint8_t *p, int64_t n) const {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<uint64_t> sums(static_cast<size_t>(chunks));
    struct Ctx {
        const KernelTable *k;
        const uint8_t *p;
        int64_t n;
        uint64_t *sums;
    } ctx{k_, p, n, sums.data()};
    parallel_for(chunks, 1, threads_, [](void *c, int64_t c0, int64_t c1) {
        auto *x = static_cast<Ctx *>(c);
        for (int64_t i = c0; i < c1; ++i) {
            const int64_t b = i * kChunk;
            x->sums[i] = x->k->sum_bytes(x->p + b, std::min(kChunk, x->n - b));
        }
    }, &ctx);
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    return total;
}

void Compute::dense(const void *w, bool f16, int64_t N, int64_t K, const float *x, int64_t T,
                    float *y) const {
    DenseArgs a{w, K, K, x, nullptr, K, nullptr, nullptr, nullptr, T, y, N};
    if (f16) run_rows<DenseArgs, &KernelTable::dense_f16>(a, N, 32);
    else run_rows<DenseArgs, &KernelTable::dense_f32>(a, N, 32);
}

void Compute::dense_i8(const DenseI8 &d, const float *x, int64_t T, float *y, int8_t *xq, float *xs,
                       int32_t *sum) const {
    quantize(x, T, d.cols, d.stride, xq, xs, sum);
    DenseArgs a{d.data.get(), d.stride, d.cols, nullptr, xq, d.stride, xs, sum, d.scales.data(), T, y, d.rows};
    run_rows<DenseArgs, &KernelTable::dense_i8>(a, d.rows, 32);
}

// How far the int8 head's logit of row r can be from the exact one, for a token
// x with scale xs: w_r = s_r q_r + a_r (|a_r| <= s_r / 2 elementwise) and
// x = xq / xs + b (|b| <= 1 / (2 xs) elementwise, round to nearest), so
//   w_r . x - s_r q_r . xq / xs = a_r . x + s_r q_r . b,
// at most s_r (|x|_1 + l1_r / xs) / 2 elementwise, and at most
// |a_r|_2 |x|_2 + s_r |q_r|_2 |b|_2 by Cauchy-Schwarz. The row's bound is the
// smaller of the two (the second is about 0.7x the first, and rules out several
// times more rows). 0.01 s_r (|x|_1 + l1_r / xs) is added to both: it covers the
// float rounding of both heads' sums, the scales and the bound itself. The exact
// head's float sum of a row is off by at most (K / 32 + 5) u 127.5 s_r |x|_1
// (u = 2^-24; 32 partial sums), below that slack up to K = 41900; wider rows
// take the exact head.
constexpr double kHeadBound = 0.5, kHeadSlack = 0.01;
constexpr int64_t kHeadBoundMaxK = 32768;

int64_t Compute::dense_i8_checked(const DenseI8 &d, const void *w, bool f16, const float *x, int64_t T,
                                  float *y, int8_t *xq, float *xs, int32_t *sum, const RowSource *source) const {
    const int64_t N = d.rows, K = d.cols;
    if (K > kHeadBoundMaxK) {
        dense(w, f16, N, K, x, T, y);
        return T * N;
    }
    dense_i8(d, x, T, y, xq, xs, sum);
    // each token's terms of the bound: A + B l1_r (elementwise), An |a_r|_2 + Bn |q_r|_2
    // (Cauchy-Schwarz), A1 + B1 l1_r (the slack)
    struct Terms {
        float A, B, An, Bn, A1, B1;
    };
    std::vector<Terms> terms(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
        const float *xt = x + t * K;
        const int8_t *qt = xq + t * d.stride;
        const double inv = 1.0 / static_cast<double>(xs[t]);
        double x1 = 0.0, x2 = 0.0, b2 = 0.0;
        for (int64_t k = 0; k < K; ++k) {
            const double v = xt[k], b = v - qt[k] * inv;
            x1 += std::fabs(v);
            x2 += v * v;
            b2 += b * b;
        }
        terms[t] = {static_cast<float>(kHeadBound * x1), static_cast<float>(kHeadBound * inv),
                    static_cast<float>(std::sqrt(x2) * (1.0 + 1e-6)), static_cast<float>(std::sqrt(b2) * (1.0 + 1e-6)),
                    static_cast<float>(kHeadSlack * x1), static_cast<float>(kHeadSlack * inv)};
    }
    // Every row's exact logit is at least lo (its value minus its bound): the largest
    // lo is one the exact maximum reaches, so only rows whose hi reaches it can hold
    // the maximum. No bound is above E = (A + A1) max s_r + (B + B1) max s_r l1_r,
    // so a row more than 2E below the largest value has a lo below the largest
    // value's and a hi below that lo: only the rows within 2E of the largest value
    // (and a margin for rounding) are bounded, which finds the same largest lo and
    // the same rows as bounding every row. A token with a non-finite value bounds
    // every row (a NaN bound recomputes its row). One token an item.
    struct Bounds {
        const DenseI8 *d;
        const Terms *terms;
        const float *y;
        int64_t N;
        std::vector<std::vector<int64_t>> *near;  // each token's rows to recompute
    };
    std::vector<std::vector<int64_t>> near(static_cast<size_t>(T));
    Bounds bounds{&d, terms.data(), y, N, &near};
    parallel_for(T, 1, threads_, [](void *c, int64_t t0, int64_t t1) {
        auto *p = static_cast<Bounds *>(c);
        const DenseI8 &d = *p->d;
        std::vector<std::pair<int64_t, float>> within;  // (row, hi)
        for (int64_t t = t0; t < t1; ++t) {
            const Terms &m = p->terms[t];
            const float *yt = p->y + t * p->N;
            float top = -INFINITY;
            bool finite = true;
            for (int64_t r = 0; r < p->N; ++r) {
                finite = finite && std::isfinite(yt[r]);
                top = yt[r] > top ? yt[r] : top;
            }
            const double E = (static_cast<double>(m.A) + m.A1) * d.scale_max +
                             (static_cast<double>(m.B) + m.B1) * d.scale_l1_max;
            const bool all = !finite || !std::isfinite(E);
            const double from = all ? 0.0 : top - 2.01 * E - 1e-4 * std::fabs(static_cast<double>(top));
            within.clear();
            float floor = -INFINITY;
            for (int64_t r = 0; r < p->N; ++r) {
                if (!all && !(yt[r] >= from)) continue;
                const float l1 = static_cast<float>(d.l1[r]);
                const float e = d.scales[r] * (std::min(m.A + m.B * l1, m.An * d.anorm[r] + m.Bn * d.qnorm[r]) +
                                               (m.A1 + m.B1 * l1));
                floor = std::max(floor, yt[r] - e);
                within.emplace_back(r, yt[r] + e);
            }
            for (const auto &[r, hi] : within)
                if (!(hi < floor)) (*p->near)[t].push_back(r);  // NaN too: recompute
        }
    }, &bounds);
    std::vector<int64_t> rows;  // row * T + token, to recompute: a row's tokens together
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r : near[t]) rows.push_back(r * T + t);
    std::sort(rows.begin(), rows.end());
    struct Ctx {
        const KernelTable *k;
        const void *w;
        bool f16;
        const float *x;
        float *y;
        int64_t N, K, T;
        const int64_t *rows;
        const RowSource *source;
    } ctx{k_, w, f16, x, y, N, K, T, rows.data(), source};
    parallel_for(static_cast<int64_t>(rows.size()), 16, threads_, [](void *c, int64_t i0, int64_t i1) {
        auto *p = static_cast<Ctx *>(c);
        const size_t row_bytes = static_cast<size_t>(p->K) * (p->f16 ? 2 : 4);
        std::vector<uint64_t> buf(p->source ? (row_bytes + 7) / 8 : 0);
        const void *wr = nullptr;
        int64_t last = -1;
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t r = p->rows[i] / p->T, t = p->rows[i] % p->T;
            if (r != last) {  // a row read once for all of its tokens
                wr = p->source ? p->source->read(p->source->ctx, r, buf.data())
                               : static_cast<const char *>(p->w) + r * row_bytes;
                last = r;
            }
            // one token, one row: the sum dense() makes of it (its rows do not depend on the
            // batch, nor on where the row is)
            DenseArgs a{wr, p->K, p->K, p->x + t * p->K, nullptr, p->K, nullptr, nullptr, nullptr, 1,
                        p->y + t * p->N + r, p->N};
            (p->f16 ? p->k->dense_f16 : p->k->dense_f32)(a, 0, 1);
        }
    }, &ctx);
    return static_cast<int64_t>(rows.size());
}

void Compute::attention(const AttentionArgs &a) const {
    if (a.T == 1) return attention_decode_many(&a, 1);
    // items are (head, block of query tokens), head-major: a chunk of items
    // reads one head's K/V rows (from L2 after its first block)
    run_rows<AttentionArgs, &KernelTable::attention>(a, a.Hq * attn_query_blocks(a.T), 1);
}

// One query token: the cache split into chunks of kAttnChunk rows over the
// threads (each chunk read once, front to back), then the chunks' softmax
// pieces merged per head: out = sum_c e^(m_c - M) o_c / sum_c e^(m_c - M) l_c.
// The split does not depend on the thread count, so neither does the result.
// Several tokens (a batched step's decode tokens, each over its own cache)
// share one job: its items are every token's chunks, so the pool is handed
// work once per layer, not once per sequence; each token's numbers are those
// it gets alone.
void Compute::attention_decode_many(const AttentionArgs *args, int64_t n) const {
    if (n < 1) return;
    // a token of a sliding-window layer attends over the window's rows: the same
    // attention over a cache that starts at the window's first row
    std::vector<AttentionArgs> windowed;
    const AttentionArgs *a = args;
    if (std::any_of(args, args + n, [](const AttentionArgs &x) { return x.window > 0 && x.start + 1 > x.window; })) {
        windowed.assign(args, args + n);
        for (AttentionArgs &w : windowed) {
            const int64_t lo = attn_first_row(w, 0);
            const size_t bytes = static_cast<size_t>(lo * w.Hkv * w.D) * (w.kv_f16 ? 2 : 4);
            w.k = static_cast<const char *>(w.k) + bytes;
            w.v = static_cast<const char *>(w.v) + bytes;
            w.start -= lo;
            w.window = 0;
        }
        a = windowed.data();
    }
    std::vector<int64_t> first(static_cast<size_t>(n + 1), 0), part_at(static_cast<size_t>(n + 1), 0);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t chunks = (a[i].start + 1 + kAttnChunk - 1) / kAttnChunk;
        first[i + 1] = first[i] + chunks;
        part_at[i + 1] = part_at[i] + chunks * a[i].Hq * (a[i].D + 2);
    }
    std::vector<float> part(static_cast<size_t>(part_at[n]));
    struct Ctx {
        const KernelTable *k;
        const AttentionArgs *a;
        const int64_t *first, *part_at;
        int64_t n;
        float *part;
    } ctx{k_, a, first.data(), part_at.data(), n, part.data()};
    parallel_for(first[n], 1, threads_, [](void *c, int64_t c0, int64_t c1) {
        auto *p = static_cast<Ctx *>(c);
        // the tokens whose chunks fall in [c0, c1)
        int64_t i = std::upper_bound(p->first, p->first + p->n + 1, c0) - p->first - 1;
        for (; i < p->n && p->first[i] < c1; ++i) {
            const int64_t lo = std::max(c0, p->first[i]) - p->first[i];
            const int64_t hi = std::min(c1, p->first[i + 1]) - p->first[i];
            p->k->attention_chunks(p->a[i], p->part + p->part_at[i], lo, hi);
        }
    }, &ctx);
    for (int64_t i = 0; i < n; ++i) {
        const AttentionArgs &t = a[i];
        const int64_t chunks = first[i + 1] - first[i], W = t.D + 2;
        const float *pt = part.data() + part_at[i];
        for (int64_t h = 0; h < t.Hq; ++h) {
            float M = -INFINITY;
            for (int64_t c = 0; c < chunks; ++c) M = std::max(M, pt[(c * t.Hq + h) * W]);
            float *out = t.out + h * t.D;
            std::fill(out, out + t.D, 0.0f);
            float L = 0.0f;
            for (int64_t c = 0; c < chunks; ++c) {
                const float *pc = pt + (c * t.Hq + h) * W;
                const float f = std::exp(pc[0] - M);
                L += f * pc[1];
                for (int64_t d = 0; d < t.D; ++d) out[d] += f * pc[2 + d];
            }
            const float inv = 1.0f / L;
            for (int64_t d = 0; d < t.D; ++d) out[d] *= inv;
        }
    }
}

namespace {

// gelu_tanh(g) * u in float64, as hal/extra_ops.py's gelu_mul_ref (the reference)
void gelu_mul_rows(const float *g, const float *u, float *out, int64_t i0, int64_t i1) {
    const double c = std::sqrt(2.0 / M_PI);
    for (int64_t i = i0; i < i1; ++i) {
        const double x = g[i];
        out[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * (x * x * x)))) * u[i]);
    }
}

}  // namespace

void Compute::gated(Activation act, const float *g, const float *u, float *out, int64_t rows, int64_t K) const {
    // one kernel call per row: its vector/scalar split falls at the same place of
    // a row whatever the batch (the scalar tail rounds exp differently)
    struct Ctx {
        void (*fn)(const float *, const float *, float *, int64_t, int64_t);
        const float *g, *u;
        float *y;
        int64_t K;
    } ctx{act == Activation::kSilu ? k_->silu_mul : act == Activation::kRelu2 ? k_->relu2_mul : &gelu_mul_rows,
          g, u, out, K};
    if (rows < 1 || K < 1) return;
    parallel_for(rows, std::max<int64_t>(1, 16384 / K), threads_, [](void *c, int64_t r0, int64_t r1) {
        auto *p = static_cast<Ctx *>(c);
        for (int64_t r = r0; r < r1; ++r) p->fn(p->g, p->u, p->y, r * p->K, (r + 1) * p->K);
    }, &ctx);
}

namespace {

void rmsnorm_rows(const float *x, const float *w, int64_t K, double eps, float *y, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        const float *xr = x + t * K;
        float *yr = y + t * K;
        // four partial sums (vectorizable; the reference sums pairwise, not in order either)
        double s[4] = {0.0, 0.0, 0.0, 0.0};
        int64_t k = 0;
        for (; k + 4 <= K; k += 4)
            for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(xr[k + j]) * xr[k + j];
        for (; k < K; ++k) s[0] += static_cast<double>(xr[k]) * xr[k];
        const double ss = (s[0] + s[1]) + (s[2] + s[3]);
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(K) + eps);
        for (int64_t k = 0; k < K; ++k) yr[k] = static_cast<float>(static_cast<double>(xr[k]) * inv * w[k]);
    }
}

struct RopeArgs {
    float *x;
    int64_t H, D;
    const RopeTable *table;
    bool neox;
};

void rope_rows(const RopeArgs &a, int64_t t0, int64_t t1) {
    const int64_t half = a.table->half;
    for (int64_t t = t0; t < t1; ++t) {
        const double *cs = a.table->cs.data() + t * half, *sn = a.table->sn.data() + t * half;
        for (int64_t h = 0; h < a.H; ++h) {
            float *xr = a.x + (t * a.H + h) * a.D;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
                const double u = xr[ia], v = xr[ib];
                xr[ia] = static_cast<float>(u * cs[i] - v * sn[i]);
                xr[ib] = static_cast<float>(v * cs[i] + u * sn[i]);
            }
        }
    }
}

constexpr int64_t kSerialTokens = 8;  // fewer tokens than this: one thread

}  // namespace

void Compute::rmsnorm(const float *x, const float *w, int64_t T, int64_t K, double eps, float *y) const {
    if (T < kSerialTokens) return rmsnorm_rows(x, w, K, eps, y, 0, T);
    struct Ctx {
        const float *x, *w;
        int64_t K;
        double eps;
        float *y;
    } ctx{x, w, K, eps, y};
    parallel_for(T, 4, threads_, [](void *c, int64_t t0, int64_t t1) {
        auto *p = static_cast<Ctx *>(c);
        rmsnorm_rows(p->x, p->w, p->K, p->eps, p->y, t0, t1);
    }, &ctx);
}

RopeTable::RopeTable(const int64_t *pos, int64_t T, double theta, int64_t rot_dim)
    : half(rot_dim / 2), cs(static_cast<size_t>(T * half)), sn(static_cast<size_t>(T * half)) {
    std::vector<double> inv(half);
    for (int64_t i = 0; i < half; ++i)
        inv[i] = std::pow(theta, -static_cast<double>(i) * 2.0 / static_cast<double>(rot_dim));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < half; ++i) {
            const double ang = static_cast<double>(pos[t]) * inv[i];
            cs[t * half + i] = std::cos(ang);
            sn[t * half + i] = std::sin(ang);
        }
}

void Compute::rope(float *x, int64_t T, int64_t H, int64_t D, const RopeTable &table, bool neox) const {
    RopeArgs a{x, H, D, &table, neox};
    if (T < kSerialTokens) return rope_rows(a, 0, T);
    parallel_for(T, 4, threads_, [](void *c, int64_t t0, int64_t t1) {
        rope_rows(*static_cast<const RopeArgs *>(c), t0, t1);
    }, &a);
}

}  // namespace bitnet
