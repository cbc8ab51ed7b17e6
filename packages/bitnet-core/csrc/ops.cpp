// Python bindings of the CPU kernels: packed weight objects and the `Kernels`
// class (one per instruction set), which splits work over the thread pool
// and releases the GIL while kernels run. Small ops whose cost is a single
// pass over memory (rmsnorm, rope) are computed here in float64 like the
// reference; the heavy kernels live in the per-ISA tables (kernels_impl.inc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels.h"
#include "native.h"
#include "threadpool.h"

namespace py = pybind11;

namespace bitnet {
namespace {

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

Buffer aligned_buffer(size_t n) {
    size_t size = (n + 63) / 64 * 64;
    void *p = std::aligned_alloc(64, size ? size : 64);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, size ? size : 64);
    return Buffer(static_cast<uint8_t *>(p));
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

float half_bits_to_float(uint16_t h) {
    const int e = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v = e == 0 ? std::ldexp(static_cast<float>(man), -24)
              : e == 31 ? (man ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(man | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

// ------------------------------------------------------------ packed weights
struct TernaryMatrix {
    std::string name, layout;
    int64_t rows = 0, cols = 0, kp = 0, row_bytes = 0;
    Buffer data;               // our packed copy (i2_128, tq1_160)
    py::object keep;           // or the file's bytes (tq2_0), kept alive here
    const uint8_t *ptr = nullptr;
    std::vector<float> scales;

    size_t nbytes() const { return static_cast<size_t>(rows * row_bytes); }
    bool i2_blocks() const { return layout != "tq1_160"; }

    // llama.cpp TQ2_0 bytes used in place (no copy): same bit layout as i2_128
    // inside 66-byte blocks. The scales follow the reference codec's rule: one
    // per row, from the blocks with a non-zero scale and a non-zero code, which
    // must all agree. Raises ValueError where the bytes cannot be used as they
    // are (code 3, a zero-scale block with non-zero codes, differing scales):
    // the caller then goes through the codec.
    static std::shared_ptr<TernaryMatrix> from_tq2_0(py::array raw, int64_t rows, int64_t cols,
                                                     const std::string &name) {
        if (cols % 256 || rows < 0) throw std::invalid_argument(name + ": TQ2_0 needs cols % 256 == 0");
        auto bytes = CArray<uint8_t>::ensure(raw);
        const int64_t row_bytes = cols / 256 * kTQ2BlockBytes;
        if (!bytes || bytes.size() != rows * row_bytes)
            throw std::invalid_argument(name + ": TQ2_0 data has the wrong size");
        auto m = std::make_shared<TernaryMatrix>();
        m->name = name;
        m->layout = "tq2_0";
        m->rows = rows;
        m->cols = cols;
        m->kp = cols;
        m->row_bytes = row_bytes;
        m->keep = bytes;
        m->ptr = bytes.data();
        m->scales.assign(rows, 0.0f);
        std::string err;
        {
            py::gil_scoped_release nogil;
            for (int64_t r = 0; r < rows && err.empty(); ++r) {
                const uint8_t *row = m->ptr + r * row_bytes;
                bool have = false;
                float scale = 0.0f;
                for (int64_t blk = 0; blk < cols / 256; ++blk) {
                    const uint8_t *b = row + blk * kTQ2BlockBytes;
                    bool live = false;
                    for (int j = 0; j < 64; ++j) {
                        uint8_t q = b[j];
                        // a 2-bit field of 3 is not ternary; 1 is a zero weight
                        if (((q & 0x55) & ((q >> 1) & 0x55)) != 0) err = "code 3";
                        if (q != 0x55) live = true;
                    }
                    uint16_t h = static_cast<uint16_t>(b[64] | (b[65] << 8));
                    float d = half_bits_to_float(h);
                    if (d == 0.0f) {
                        if (live) err = "a zero-scale block with non-zero codes";
                        continue;
                    }
                    if (!live) continue;
                    if (have && d != scale) err = "rows with more than one scale";
                    have = true;
                    scale = d;
                }
                m->scales[r] = scale;
            }
        }
        if (!err.empty()) throw std::invalid_argument(name + ": TQ2_0 data not usable in place (" + err + ")");
        return m;
    }

    static std::shared_ptr<TernaryMatrix> from_codes(CArray<int8_t> codes, CArray<float> scales,
                                                     const std::string &layout,
                                                     const std::string &name) {
        if (codes.ndim() != 2) throw std::invalid_argument(name + ": ternary codes must be 2-D");
        auto m = std::make_shared<TernaryMatrix>();
        m->name = name;
        m->layout = layout;
        m->rows = codes.shape(0);
        m->cols = codes.shape(1);
        if (scales.ndim() != 1 || scales.shape(0) != m->rows)
            throw std::invalid_argument(name + ": need one scale per row");
        if (layout == "i2_128") {
            m->kp = round_up(std::max<int64_t>(m->cols, 1), kI2Block);
            m->row_bytes = m->kp / 4;
        } else if (layout == "tq1_160") {
            m->kp = round_up(std::max<int64_t>(m->cols, 1), kTQ1Block);
            m->row_bytes = m->kp / kTQ1Block * 32;
        } else {
            throw std::invalid_argument("unknown ternary layout '" + layout + "' (i2_128, tq1_160)");
        }
        m->data = aligned_buffer(m->nbytes());
        m->ptr = m->data.get();
        m->scales.assign(scales.data(), scales.data() + m->rows);
        const int8_t *c = codes.data();
        bool bad = false;
        {
            py::gil_scoped_release nogil;
            for (int64_t r = 0; r < m->rows; ++r) {
                const int8_t *cr = c + r * m->cols;
                uint8_t *out = m->data.get() + r * m->row_bytes;
                auto code = [&](int64_t col) -> int {
                    if (col >= m->cols) return 1;
                    int v = cr[col];
                    if (v < -1 || v > 1) bad = true;
                    return v + 1;
                };
                if (layout == "i2_128") {
                    for (int64_t b = 0; b < m->kp / kI2Block; ++b)
                        for (int j = 0; j < 32; ++j) {
                            int byte = 0;
                            for (int i = 0; i < 4; ++i) byte |= code(b * kI2Block + 32 * i + j) << (2 * i);
                            out[b * 32 + j] = static_cast<uint8_t>(byte);
                        }
                } else {
                    for (int64_t b = 0; b < m->kp / kTQ1Block; ++b)
                        for (int j = 0; j < 32; ++j) {
                            int v = 0;
                            for (int i = 0; i < 5; ++i) v = v * 3 + code(b * kTQ1Block + 32 * i + j);
                            int q = (v * 256 + 242) / 243;
                            out[b * 32 + j] = static_cast<uint8_t>(q ^ 0x80);
                        }
                }
            }
        }
        if (bad) throw std::domain_error(name + ": ternary codes must be in {-1, 0, +1}");
        return m;
    }

    // int8 codes [rows, cols] back from the packed layout
    py::array_t<int8_t> codes() const {
        py::array_t<int8_t> out({rows, cols});
        int8_t *o = out.mutable_data();
        for (int64_t r = 0; r < rows; ++r) unpack_row(r, o + r * cols);
        return out;
    }

    void unpack_row(int64_t r, int8_t *o) const {
        const uint8_t *w = ptr + r * row_bytes;
        static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
        const bool tq2 = layout == "tq2_0";
        for (int64_t c = 0; c < cols; ++c) {
            if (i2_blocks()) {
                int64_t b = c / kI2Block, i = (c % kI2Block) / 32, j = c % 32;
                o[c] = static_cast<int8_t>(((i2_block(w, b, tq2)[j] >> (2 * i)) & 3) - 1);
            } else {
                int64_t b = c / kTQ1Block, i = (c % kTQ1Block) / 32, j = c % 32;
                uint8_t q = static_cast<uint8_t>((w[b * 32 + j] ^ 0x80) * pow3[i]);
                o[c] = static_cast<int8_t>(((q * 3) >> 8) - 1);
            }
        }
    }
};

// a dense table as int8 rows (padded to 32 columns) with per-row absmax scales
struct DenseI8 {
    int64_t rows = 0, cols = 0, stride = 0;
    Buffer data;
    std::vector<float> scales;
    size_t nbytes() const { return static_cast<size_t>(rows * stride); }
};

std::shared_ptr<DenseI8> dense_i8_from(CArray<float> table) {
    if (table.ndim() != 2) throw std::invalid_argument("dense table must be 2-D");
    auto d = std::make_shared<DenseI8>();
    d->rows = table.shape(0);
    d->cols = table.shape(1);
    d->stride = round_up(std::max<int64_t>(d->cols, 1), 32);
    d->data = aligned_buffer(d->nbytes());
    d->scales.resize(d->rows);
    const float *t = table.data();
    py::gil_scoped_release nogil;
    for (int64_t r = 0; r < d->rows; ++r) {
        const float *tr = t + r * d->cols;
        float amax = 0.0f;
        for (int64_t c = 0; c < d->cols; ++c) amax = std::max(amax, std::fabs(tr[c]));
        float s = amax > 0.0f ? amax / 127.0f : 1.0f;
        d->scales[r] = s;
        int8_t *o = reinterpret_cast<int8_t *>(d->data.get()) + r * d->stride;
        for (int64_t c = 0; c < d->cols; ++c)
            o[c] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, std::nearbyint(tr[c] / s))));
    }
    return d;
}

// --------------------------------------------------------------- the kernels
template <typename Args, void (*(KernelTable::*Member))(const Args &, int64_t, int64_t)>
struct Job {
    const KernelTable *k;
    const Args *a;
    static void run(void *ctx, int64_t b, int64_t e) {
        auto *j = static_cast<Job *>(ctx);
        (j->k->*Member)(*j->a, b, e);
    }
};

class Kernels {
  public:
    Kernels(const std::string &isa, int threads) : threads_(threads) {
        if (isa == "scalar") k_ = kernels_scalar();
        else if (isa == "avx2") k_ = kernels_avx2();
        else if (isa == "avx512") k_ = kernels_avx512();
        else if (isa == "neon") k_ = kernels_neon();
        else throw std::invalid_argument("unknown instruction set '" + isa + "'");
        if (!k_) throw std::invalid_argument("kernels for '" + isa + "' are not compiled into this build");
        // running a table the CPU cannot execute would die of SIGILL: refuse instead
        static const std::map<std::string, std::vector<std::string>> needs = {
            {"avx2", {"avx2", "fma", "f16c"}},
            {"avx512", {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"}},
        };
        auto it = needs.find(isa);
        if (it != needs.end()) {
            auto feats = cpu_features();
            for (const auto &f : it->second)
                if (!feats[f]) throw std::invalid_argument("CPU lacks " + f + " (needed by the " + isa + " kernels)");
        }
        if (threads_ <= 0) threads_ = default_threads();
    }

    std::string isa() const { return k_->name; }
    int threads() const { return threads_; }

    py::tuple quantize_act(CArray<float> x) {
        auto [T, K] = shape2(x, "quantize_act");
        py::array_t<int8_t> xq({T, K});
        py::array_t<float> xs(T);
        std::vector<int32_t> sum(T);
        {
            py::gil_scoped_release nogil;
            quantize(x.data(), T, K, K, xq.mutable_data(), xs.mutable_data(), sum.data());
        }
        return py::make_tuple(xq, xs);
    }

    py::array_t<float> linear(CArray<float> x, const TernaryMatrix &w) {
        auto [T, K] = shape2(x, "linear");
        check_k(K, w);
        py::array_t<float> y({T, w.rows});
        {
            py::gil_scoped_release nogil;
            Buffer xq = aligned_buffer(static_cast<size_t>(T * w.kp));
            std::vector<float> xs(T);
            std::vector<int32_t> sum(T);
            quantize(x.data(), T, K, w.kp, reinterpret_cast<int8_t *>(xq.get()), xs.data(), sum.data());
            ternary(w, reinterpret_cast<int8_t *>(xq.get()), xs.data(), sum.data(), T, y.mutable_data());
        }
        return y;
    }

    py::array_t<float> matmul_i2s(CArray<int8_t> xq, CArray<float> xs, const TernaryMatrix &w) {
        auto [T, K] = shape2(xq, "matmul_i2s");
        check_k(K, w);
        if (xs.ndim() != 1 || xs.shape(0) != T)
            throw std::invalid_argument("matmul_i2s: need one activation scale per token");
        py::array_t<float> y({T, w.rows});
        {
            py::gil_scoped_release nogil;
            Buffer xp = aligned_buffer(static_cast<size_t>(T * w.kp));
            int8_t *xpd = reinterpret_cast<int8_t *>(xp.get());
            std::vector<int32_t> sum(T);
            for (int64_t t = 0; t < T; ++t) {
                const int8_t *src = xq.data() + t * K;
                std::memcpy(xpd + t * w.kp, src, static_cast<size_t>(K));
                int32_t s = 0;
                for (int64_t k = 0; k < K; ++k) s += src[k];
                sum[t] = s;
            }
            ternary(w, xpd, xs.data(), sum.data(), T, y.mutable_data());
        }
        return y;
    }

    py::array_t<float> matmul_ternary_float(CArray<float> x, const TernaryMatrix &w) {
        auto [T, K] = shape2(x, "matmul_ternary_float");
        check_k(K, w);
        py::array_t<float> y({T, w.rows});
        struct Ctx {
            const TernaryMatrix *w;
            const float *x;
            float *y;
            int64_t T;
        } ctx{&w, x.data(), y.mutable_data(), T};
        {
            py::gil_scoped_release nogil;
            parallel_for(w.rows, 16, threads_, [](void *c, int64_t r0, int64_t r1) {
                auto *p = static_cast<Ctx *>(c);
                std::vector<int8_t> codes(p->w->cols);
                for (int64_t r = r0; r < r1; ++r) {
                    p->w->unpack_row(r, codes.data());
                    for (int64_t t = 0; t < p->T; ++t) {
                        const float *xr = p->x + t * p->w->cols;
                        double acc = 0.0;
                        for (int64_t k = 0; k < p->w->cols; ++k) acc += static_cast<double>(xr[k]) * codes[k];
                        p->y[t * p->w->rows + r] = static_cast<float>(acc * p->w->scales[r]);
                    }
                }
            }, &ctx);
        }
        return y;
    }

    py::array_t<float> matmul_dense(CArray<float> x, py::array table) {
        auto [T, K] = shape2(x, "matmul_dense");
        if (table.ndim() != 2 || table.shape(1) != K)
            throw std::invalid_argument("matmul_dense: activations do not match the table");
        bool f16 = table.dtype().is(py::dtype("float16"));
        py::array tab = f16 ? py::array(CArray<uint16_t>::ensure(table.attr("view")("uint16")))
                            : py::array(CArray<float>::ensure(table));
        if (!tab) throw std::invalid_argument("matmul_dense: table must be float16 or float32");
        const int64_t N = table.shape(0);
        py::array_t<float> y({T, N});
        DenseArgs a{tab.data(), K, K, x.data(), nullptr, K, nullptr, nullptr, T, y.mutable_data(), N};
        {
            py::gil_scoped_release nogil;
            if (f16) run_rows<DenseArgs, &KernelTable::dense_f16>(a, N, 32);
            else run_rows<DenseArgs, &KernelTable::dense_f32>(a, N, 32);
        }
        return y;
    }

    py::array_t<float> matmul_dense_i8(CArray<float> x, const DenseI8 &d) {
        auto [T, K] = shape2(x, "matmul_dense_i8");
        if (K != d.cols) throw std::invalid_argument("matmul_dense_i8: activations do not match the table");
        py::array_t<float> y({T, d.rows});
        {
            py::gil_scoped_release nogil;
            Buffer xq = aligned_buffer(static_cast<size_t>(T * d.stride));
            std::vector<float> xs(T);
            std::vector<int32_t> sum(T);
            int8_t *xqd = reinterpret_cast<int8_t *>(xq.get());
            quantize(x.data(), T, K, d.stride, xqd, xs.data(), sum.data());
            DenseArgs a{d.data.get(), d.stride, K, nullptr, xqd, d.stride, xs.data(),
                        d.scales.data(), T, y.mutable_data(), d.rows};
            run_rows<DenseArgs, &KernelTable::dense_i8>(a, d.rows, 32);
        }
        return y;
    }

    py::array_t<float> attention(CArray<float> q, CArray<float> kc, CArray<float> vc, int64_t start) {
        if (q.ndim() != 3 || kc.ndim() != 3 || vc.ndim() != 3)
            throw std::invalid_argument("attention: q and the caches must be [T, H, D]");
        const int64_t T = q.shape(0), Hq = q.shape(1), D = q.shape(2), Hkv = kc.shape(1);
        if (Hkv == 0 || Hq % Hkv || kc.shape(2) != D || start < 0 || start + T > kc.shape(0) ||
            vc.shape(0) != kc.shape(0) || vc.shape(1) != Hkv || vc.shape(2) != D)
            throw std::invalid_argument("attention: q does not match the caches at this start");
        py::array_t<float> out({T, Hq, D});
        AttentionArgs a{q.data(), kc.data(), vc.data(), out.mutable_data(), T, Hq, Hkv, D, start,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
        {
            py::gil_scoped_release nogil;
            run_rows<AttentionArgs, &KernelTable::attention>(a, T * Hq, 1);
        }
        return out;
    }

    py::array_t<float> rmsnorm(CArray<float> x, CArray<float> w, double eps) {
        if (x.ndim() < 1 || w.ndim() != 1 || w.shape(0) != x.shape(x.ndim() - 1))
            throw std::invalid_argument("rmsnorm: the weight must match the last dimension");
        const int64_t K = w.shape(0), T = K ? x.size() / K : 0;
        py::array_t<float> y(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        const float *xd = x.data(), *wd = w.data();
        float *yd = y.mutable_data();
        py::gil_scoped_release nogil;
        for (int64_t t = 0; t < T; ++t) {
            const float *xr = xd + t * K;
            double ss = 0.0;
            for (int64_t k = 0; k < K; ++k) ss += static_cast<double>(xr[k]) * xr[k];
            const double inv = 1.0 / std::sqrt(ss / static_cast<double>(K) + eps);
            for (int64_t k = 0; k < K; ++k)
                yd[t * K + k] = static_cast<float>(static_cast<double>(xr[k]) * inv * wd[k]);
        }
        return y;
    }

    py::array_t<float> rope(CArray<float> x, CArray<int64_t> positions, double theta,
                            const std::string &style, int64_t rot_dim) {
        if (x.ndim() != 3) throw std::invalid_argument("rope expects [T, H, D]");
        const int64_t T = x.shape(0), H = x.shape(1), D = x.shape(2);
        if (rot_dim > D || rot_dim % 2 || rot_dim < 0)
            throw std::invalid_argument("rope: rot_dim must be even and <= head dim");
        if (positions.size() != T) throw std::invalid_argument("rope: need one position per token");
        const bool neox = style == "neox";
        if (!neox && style != "norm") throw std::domain_error("unknown rope style '" + style + "'");
        py::array_t<float> y({T, H, D});
        const float *xd = x.data();
        const int64_t *pos = positions.data();
        float *yd = y.mutable_data();
        py::gil_scoped_release nogil;
        std::memcpy(yd, xd, sizeof(float) * static_cast<size_t>(T * H * D));
        const int64_t half = rot_dim / 2;
        std::vector<double> inv(half), cs(half), sn(half);
        for (int64_t i = 0; i < half; ++i)
            inv[i] = std::pow(theta, -static_cast<double>(i) * 2.0 / static_cast<double>(rot_dim));
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t i = 0; i < half; ++i) {
                double ang = static_cast<double>(pos[t]) * inv[i];
                cs[i] = std::cos(ang);
                sn[i] = std::sin(ang);
            }
            for (int64_t h = 0; h < H; ++h) {
                const float *xr = xd + (t * H + h) * D;
                float *yr = yd + (t * H + h) * D;
                for (int64_t i = 0; i < half; ++i) {
                    int64_t ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
                    double a = xr[ia], b = xr[ib];
                    yr[ia] = static_cast<float>(a * cs[i] - b * sn[i]);
                    yr[ib] = static_cast<float>(b * cs[i] + a * sn[i]);
                }
            }
        }
        return y;
    }

    py::array_t<float> silu_mul(CArray<float> g, CArray<float> u) { return gated(g, u, k_->silu_mul); }
    py::array_t<float> relu2_mul(CArray<float> g, CArray<float> u) { return gated(g, u, k_->relu2_mul); }

  private:
    template <typename A>
    static std::pair<int64_t, int64_t> shape2(const A &x, const char *op) {
        if (x.ndim() != 2) throw std::invalid_argument(std::string(op) + " expects [T, K] activations");
        return {x.shape(0), x.shape(1)};
    }
    static void check_k(int64_t K, const TernaryMatrix &w) {
        if (K != w.cols)
            throw std::invalid_argument("activations of " + std::to_string(K) + " features do not match weight '" +
                                        w.name + "' [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
    }

    template <typename Args, void (*(KernelTable::*Member))(const Args &, int64_t, int64_t)>
    void run_rows(const Args &a, int64_t n, int64_t grain) {
        Job<Args, Member> job{k_, &a};
        // a few chunks per thread so a descheduled thread does not stall the others
        int64_t g = std::max<int64_t>(grain, n / (threads_ * 8) / grain * grain);
        parallel_for(n, g, threads_, &Job<Args, Member>::run, &job);
    }

    void quantize(const float *x, int64_t T, int64_t K, int64_t kp, int8_t *xq, float *xs, int32_t *sum) {
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

    void ternary(const TernaryMatrix &w, const int8_t *xq, const float *xs, const int32_t *sum,
                 int64_t T, float *y) {
        TernaryArgs a{w.ptr, w.row_bytes, w.scales.data(), w.kp, xq, w.kp, sum, xs, T, y, w.rows,
                      w.layout == "tq2_0"};
        if (w.i2_blocks()) run_rows<TernaryArgs, &KernelTable::ternary_i2>(a, w.rows, 16);
        else run_rows<TernaryArgs, &KernelTable::ternary_tq1>(a, w.rows, 16);
    }

    py::array_t<float> gated(CArray<float> g, CArray<float> u,
                             void (*fn)(const float *, const float *, float *, int64_t, int64_t)) {
        if (g.ndim() != u.ndim() || g.size() != u.size())
            throw std::invalid_argument("gate and up must have the same shape");
        for (py::ssize_t i = 0; i < g.ndim(); ++i)
            if (g.shape(i) != u.shape(i)) throw std::invalid_argument("gate and up must have the same shape");
        py::array_t<float> y(std::vector<py::ssize_t>(g.shape(), g.shape() + g.ndim()));
        struct Ctx {
            void (*fn)(const float *, const float *, float *, int64_t, int64_t);
            const float *g, *u;
            float *y;
        } ctx{fn, g.data(), u.data(), y.mutable_data()};
        py::gil_scoped_release nogil;
        parallel_for(g.size(), 16384, threads_, [](void *c, int64_t i0, int64_t i1) {
            auto *p = static_cast<Ctx *>(c);
            p->fn(p->g, p->u, p->y, i0, i1);
        }, &ctx);
        return y;
    }

    const KernelTable *k_ = nullptr;
    int threads_ = 1;
};

}  // namespace

void register_ops(py::module_ &m) {
    m.def("default_threads", &default_threads, "CPUs this process may run on (sched_getaffinity).");
    m.def("compiled_isas", [] {
        std::vector<std::string> v{"scalar"};
        if (kernels_avx2()) v.push_back("avx2");
        if (kernels_avx512()) v.push_back("avx512");
        if (kernels_neon()) v.push_back("neon");
        return v;
    }, "Instruction sets whose kernels are compiled into this build.");

    py::class_<TernaryMatrix, std::shared_ptr<TernaryMatrix>>(m, "TernaryMatrix",
        "A ternary weight repacked for the CPU kernels (layout i2_128 or tq1_160).")
        .def_static("from_codes", &TernaryMatrix::from_codes, py::arg("codes"), py::arg("scales"),
                    py::arg("layout") = "i2_128", py::arg("name") = "weight")
        .def_static("from_tq2_0", &TernaryMatrix::from_tq2_0, py::arg("raw"), py::arg("rows"), py::arg("cols"),
                    py::arg("name") = "weight", "Use llama.cpp TQ2_0 bytes in place (kept alive, not copied).")
        .def_readonly("name", &TernaryMatrix::name)
        .def_readonly("layout", &TernaryMatrix::layout)
        .def_readonly("rows", &TernaryMatrix::rows)
        .def_readonly("cols", &TernaryMatrix::cols)
        .def_property_readonly("shape", [](const TernaryMatrix &w) { return py::make_tuple(w.rows, w.cols); })
        .def_property_readonly("nbytes", &TernaryMatrix::nbytes)
        .def_property_readonly("scales", [](const TernaryMatrix &w) {
            return py::array_t<float>(static_cast<py::ssize_t>(w.scales.size()), w.scales.data());
        })
        .def("codes", &TernaryMatrix::codes, "The int8 codes [rows, cols] unpacked again.");

    py::class_<DenseI8, std::shared_ptr<DenseI8>>(m, "DenseI8",
        "A dense table as int8 rows with per-row absmax scales (the int8 output head).")
        .def(py::init(&dense_i8_from), py::arg("table"))
        .def_readonly("rows", &DenseI8::rows)
        .def_readonly("cols", &DenseI8::cols)
        .def_property_readonly("shape", [](const DenseI8 &d) { return py::make_tuple(d.rows, d.cols); })
        .def_property_readonly("nbytes", &DenseI8::nbytes);

    py::class_<Kernels>(m, "Kernels", "The CPU kernels of one instruction set, on `threads` threads.")
        .def(py::init<const std::string &, int>(), py::arg("isa"), py::arg("threads") = 0)
        .def_property_readonly("isa", &Kernels::isa)
        .def_property_readonly("threads", &Kernels::threads)
        .def("quantize_act", &Kernels::quantize_act, py::arg("x"))
        .def("linear", &Kernels::linear, py::arg("x"), py::arg("weight"))
        .def("matmul_i2s", &Kernels::matmul_i2s, py::arg("xq"), py::arg("xscale"), py::arg("weight"))
        .def("matmul_ternary_float", &Kernels::matmul_ternary_float, py::arg("x"), py::arg("weight"))
        .def("matmul_dense", &Kernels::matmul_dense, py::arg("x"), py::arg("table"))
        .def("matmul_dense_i8", &Kernels::matmul_dense_i8, py::arg("x"), py::arg("table"))
        .def("attention", &Kernels::attention, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("start"))
        .def("rmsnorm", &Kernels::rmsnorm, py::arg("x"), py::arg("weight"), py::arg("eps"))
        .def("rope", &Kernels::rope, py::arg("x"), py::arg("positions"), py::arg("theta"), py::arg("style"),
             py::arg("rot_dim"))
        .def("silu_mul", &Kernels::silu_mul, py::arg("gate"), py::arg("up"))
        .def("relu2_mul", &Kernels::relu2_mul, py::arg("gate"), py::arg("up"));
}

}  // namespace bitnet
