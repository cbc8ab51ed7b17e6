// Every kernel of the SIMD tables compiled for this machine against the
// portable scalar table (itself tested against the numpy reference by the
// Python tests), on random inputs of awkward shapes. Built without Python, so
// it can be cross-compiled and run under an emulator: tests/test_neon_cross.py
// builds it with aarch64-linux-gnu-g++ and runs it under qemu-aarch64, once on
// a CPU with SDOT and once without, which checks the run-time choice too;
// tests/test_avx512_emulated.py builds it for x86 with the AVX-512 table's
// 512-bit intrinsics emulated by SIMDe and runs it on this CPU.
//
//   check_kernels [--isa neon|avx2|avx512] [--expect NAME]
//     (the table to check, default neon; NAME: the table it must be)
//
// Integer kernels (ternary, int8, quantization, byte sums) and relu2_mul must match bit
// for bit; float kernels (dense, attention, SiLU) within a relative 1e-5 of the
// sum of |terms|. Output outside the rows asked for must stay untouched.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels.h"

using namespace bitnet;

namespace {

std::mt19937_64 rng(20261123);
int failures = 0, checks = 0;

int rand_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
float rand_float(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

void fail(const std::string &what) {
    if (++failures <= 20) std::printf("FAIL %s\n", what.c_str());
}

const float kSentinel = -12345.0f;

// y (T x y_stride) from both tables: rows [r0, r1) equal (bitwise or within
// tol * scale), every other element still the sentinel
void compare_outputs(const std::string &what, const std::vector<float> &want, const std::vector<float> &got,
                     int64_t T, int64_t N, int64_t y_stride, int64_t r0, int64_t r1, double tol,
                     const std::vector<double> &scale) {
    ++checks;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < y_stride; ++r) {
            const int64_t i = t * y_stride + r;
            const bool inside = r >= r0 && r < r1 && r < N;
            if (!inside) {
                if (got[i] != kSentinel) return fail(what + ": wrote outside its rows at t=" + std::to_string(t) +
                                                     " r=" + std::to_string(r));
                continue;
            }
            const bool ok = tol == 0.0 ? std::memcmp(&want[i], &got[i], 4) == 0
                                       : std::fabs(double(want[i]) - double(got[i])) <= tol * scale[i] + 1e-30;
            if (!ok) {
                char buf[160];
                std::snprintf(buf, sizeof buf, ": t=%lld r=%lld want %.9g got %.9g", (long long)t, (long long)r,
                              want[i], got[i]);
                return fail(what + buf);
            }
        }
}

struct Ternary {
    std::vector<uint8_t> w;
    std::vector<int8_t> xq;
    std::vector<int32_t> xsum;
    std::vector<float> wscale, xs;
};

// random activations (or the extreme -128 / 127 everywhere) for T tokens of kp
void fill_activations(Ternary &d, int64_t T, int64_t kp, int64_t x_stride, int extreme) {
    d.xq.assign(T * x_stride, 0);
    d.xsum.assign(T, 0);
    d.xs.resize(T);
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t k = 0; k < kp; ++k) {
            const int8_t v = extreme ? static_cast<int8_t>(extreme > 0 ? 127 : -128) : static_cast<int8_t>(rand_int(-128, 127));
            d.xq[t * x_stride + k] = v;
            d.xsum[t] += v;
        }
        for (int64_t k = kp; k < x_stride; ++k) d.xq[t * x_stride + k] = static_cast<int8_t>(rand_int(-128, 127));
        d.xs[t] = rand_float(0.5f, 300.0f);
    }
}

void run_ternary(const KernelTable *k, const KernelTable *ref, bool tq1, bool tq2, int64_t N, int64_t nblocks,
                 int64_t T, int extreme) {
    const int64_t block = tq1 ? kTQ1Block : kI2Block;
    const int64_t kp = nblocks * block;
    const int64_t row_bytes = tq1 ? nblocks * 32 : tq2 ? nblocks / 2 * kTQ2BlockBytes : nblocks * 32;
    const int64_t x_stride = kp + 64, y_stride = N + 3;
    Ternary d;
    d.w.resize(N * row_bytes + 64);
    for (auto &b : d.w) {
        if (tq1) b = static_cast<uint8_t>(rand_int(0, 255));
        else if (extreme) b = 0xAA;  // every code 2 (w = +1)
        else b = static_cast<uint8_t>(rand_int(0, 2) | rand_int(0, 2) << 2 | rand_int(0, 2) << 4 | rand_int(0, 2) << 6);
    }
    d.wscale.resize(N);
    for (auto &s : d.wscale) s = rand_float(0.01f, 2.0f);
    fill_activations(d, T, kp, x_stride, extreme);
    TernaryArgs a{d.w.data(), row_bytes, d.wscale.data(), kp, d.xq.data(), x_stride, d.xsum.data(),
                  d.xs.data(), T, nullptr, y_stride, tq2};
    const int64_t r0 = N > 4 ? 1 : 0, r1 = N > 4 ? N - 2 : N;
    std::vector<float> want(T * y_stride, kSentinel), got(T * y_stride, kSentinel);
    a.y = want.data();
    (tq1 ? ref->ternary_tq1 : ref->ternary_i2)(a, r0, r1);
    a.y = got.data();
    (tq1 ? k->ternary_tq1 : k->ternary_i2)(a, r0, r1);
    char what[160];
    std::snprintf(what, sizeof what, "%s ternary_%s N=%lld blocks=%lld T=%lld extreme=%d", k->name,
                  tq1 ? "tq1" : tq2 ? "tq2" : "i2", (long long)N, (long long)nblocks, (long long)T, extreme);
    compare_outputs(what, want, got, T, N, y_stride, r0, r1, 0.0, {});
    if (!tq1 && k->pair_activations) {
        // the activations in pairs order made by the caller (as Compute::ternary does)
        std::vector<int8_t> pairs(T * pairs_stride(x_stride), 99);
        k->pair_activations(d.xq.data(), x_stride, T, pairs.data());
        a.xq_pairs = pairs.data();
        std::vector<float> got2(T * y_stride, kSentinel);
        a.y = got2.data();
        k->ternary_i2(a, r0, r1);
        compare_outputs(std::string(what) + " (caller's pairs)", want, got2, T, N, y_stride, r0, r1, 0.0, {});
    }
}

void check_ternary(const KernelTable *k, const KernelTable *ref) {
    const int64_t rows[] = {1, 2, 3, 5, 8, 13, 37, 70};
    const int64_t tokens[] = {1, 2, 3, 4, 5, 7, 8, 9, 13};
    for (int layout = 0; layout < 3; ++layout) {
        const bool tq1 = layout == 2, tq2 = layout == 1;
        for (int64_t N : rows)
            for (int64_t T : tokens) {
                int64_t nb = rand_int(1, 40);
                if (tq2) nb = 2 * rand_int(1, 20);  // TQ2_0 blocks hold two i2 blocks
                run_ternary(k, ref, tq1, tq2, N, nb, T, 0);
            }
        // the i32 / i16 windows at their limits: long rows of the largest products
        for (int extreme : {-1, 1})
            for (int64_t T : {1, 4, 9}) run_ternary(k, ref, tq1, tq2, 6, tq2 ? 130 : 129, T, extreme);
    }
}

void check_quantize(const KernelTable *k, const KernelTable *ref) {
    for (int64_t K : {1, 3, 7, 8, 9, 33, 100, 640, 1537}) {
        const int64_t kp = (K + 127) / 128 * 128, T = 5;
        std::vector<float> x(T * K);
        for (auto &v : x) v = rand_float(-3.0f, 3.0f);
        for (int64_t j = 0; j < K; ++j) x[2 * K + j] = 0.0f;  // an all-zero row: the 1e-5 floor
        // values that land exactly on .5 after scaling (ties round to even)
        for (int64_t j = 0; j < K; ++j) x[3 * K + j] = (j % 2 ? -1.0f : 1.0f) * static_cast<float>(j % 255) / 2.0f;
        std::vector<int8_t> qa(T * kp, 77), qb(T * kp, 77);
        std::vector<float> sa(T), sb(T);
        std::vector<int32_t> ua(T), ub(T);
        ref->quantize_rows(x.data(), K, kp, qa.data(), sa.data(), ua.data(), 1, T);
        k->quantize_rows(x.data(), K, kp, qb.data(), sb.data(), ub.data(), 1, T);
        ++checks;
        if (qa != qb || std::memcmp(sa.data() + 1, sb.data() + 1, 4 * (T - 1)) != 0 ||
            std::memcmp(ua.data() + 1, ub.data() + 1, 4 * (T - 1)) != 0)
            fail(std::string(k->name) + " quantize_rows K=" + std::to_string(K));
    }
}

void run_dense(const KernelTable *k, const KernelTable *ref, int kind, int64_t N, int64_t K, int64_t T) {
    // kind 0: float16 weights, 1: float32, 2: int8 (w_stride a multiple of 32)
    const int64_t w_stride = kind == 2 ? (K + 31) / 32 * 32 : K + rand_int(0, 5);
    const int64_t x_stride = w_stride + 8, y_stride = N + 2;
    std::vector<uint16_t> w16(N * w_stride);
    std::vector<float> w32(N * w_stride), x(T * x_stride), xs(T), wscale(N);
    std::vector<int8_t> w8(N * w_stride), xq(T * x_stride, 0);
    for (int64_t i = 0; i < N * w_stride; ++i) {
        const float v = rand_float(-1.0f, 1.0f);
        w32[i] = v;
        uint16_t h;
        k->to_f16(&v, &h, 1);
        w16[i] = h;
        w8[i] = static_cast<int8_t>(rand_int(-127, 127));
    }
    for (auto &v : x) v = rand_float(-2.0f, 2.0f);
    std::vector<int32_t> xsum(T, 0);  // as Compute::quantize gives them
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < K; ++j) {
            xq[t * x_stride + j] = static_cast<int8_t>(rand_int(-127, 127));
            xsum[t] += xq[t * x_stride + j];
        }
    for (auto &v : xs) v = rand_float(1.0f, 100.0f);
    for (auto &v : wscale) v = rand_float(0.001f, 0.1f);
    DenseArgs a{kind == 0 ? static_cast<const void *>(w16.data())
                : kind == 1 ? static_cast<const void *>(w32.data())
                            : static_cast<const void *>(w8.data()),
                w_stride, K, x.data(), xq.data(), x_stride, xs.data(), xsum.data(), wscale.data(), T, nullptr, y_stride};
    auto fn = [&](const KernelTable *t) { return kind == 0 ? t->dense_f16 : kind == 1 ? t->dense_f32 : t->dense_i8; };
    const int64_t r0 = N > 3 ? 2 : 0, r1 = N;
    std::vector<float> want(T * y_stride, kSentinel), got(T * y_stride, kSentinel);
    a.y = want.data();
    fn(ref)(a, r0, r1);
    a.y = got.data();
    fn(k)(a, r0, r1);
    std::vector<double> scale(T * y_stride, 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < N; ++r)
            for (int64_t j = 0; j < K; ++j)
                scale[t * y_stride + r] += std::fabs(double(x[t * x_stride + j]) * w32[r * w_stride + j]);
    static const char *kinds[] = {"dense_f16", "dense_f32", "dense_i8"};
    char what[160];
    std::snprintf(what, sizeof what, "%s %s N=%lld K=%lld T=%lld", k->name, kinds[kind], (long long)N,
                  (long long)K, (long long)T);
    compare_outputs(what, want, got, T, N, y_stride, r0, r1, kind == 2 ? 0.0 : 1e-5, scale);
}

void check_dense(const KernelTable *k, const KernelTable *ref) {
    for (int kind = 0; kind < 3; ++kind)
        for (int64_t N : {1, 4, 5, 19, 33, 70})
            for (int64_t T : {1, 2, 3, 4, 5, 8, 9})
                for (int64_t K : {1, 7, 32, 45, 200, 1000}) run_dense(k, ref, kind, N, K, T);
}

void check_attention(const KernelTable *k, const KernelTable *ref) {
    struct Shape { int64_t T, Hq, Hkv, D, start; };
    const Shape shapes[] = {{1, 4, 2, 8, 0},    {1, 6, 2, 13, 40},   {3, 4, 4, 16, 5},  {5, 8, 2, 24, 70},
                            {1, 2, 1, 64, 100}, {2, 8, 2, 128, 33}, {1, 8, 4, 80, 200}, {9, 4, 4, 20, 12},
                            {8, 6, 3, 7, 0}};
    for (const Shape &s : shapes)
        for (int f16 = 0; f16 < 2; ++f16) {
            const int64_t S = s.start + s.T;
            std::vector<float> q(s.T * s.Hq * s.D), kf(S * s.Hkv * s.D), vf(kf.size());
            for (auto &v : q) v = rand_float(-1.0f, 1.0f);
            for (auto &v : kf) v = rand_float(-1.0f, 1.0f);
            for (auto &v : vf) v = rand_float(-1.0f, 1.0f);
            std::vector<uint16_t> kh(kf.size()), vh(vf.size());
            ref->to_f16(kf.data(), kh.data(), static_cast<int64_t>(kf.size()));
            ref->to_f16(vf.data(), vh.data(), static_cast<int64_t>(vf.size()));
            AttentionArgs a{q.data(), f16 ? static_cast<const void *>(kh.data()) : kf.data(),
                            f16 ? static_cast<const void *>(vh.data()) : vf.data(), nullptr, s.T, s.Hq, s.Hkv,
                            s.D, s.start, 1.0f / std::sqrt(static_cast<float>(s.D)), f16 != 0};
            std::vector<float> want(q.size(), kSentinel), got(q.size(), kSentinel);
            const int64_t items = s.Hq * attn_query_blocks(s.T);  // (head, query block) pairs
            a.out = want.data();
            ref->attention(a, 0, items);
            a.out = got.data();
            k->attention(a, 0, items);
            ++checks;
            for (size_t i = 0; i < want.size(); ++i)
                if (!(std::fabs(want[i] - got[i]) <= 1e-5f)) {
                    fail(std::string(k->name) + " attention D=" + std::to_string(s.D));
                    break;
                }
            if (s.T == 1) {
                const int64_t chunks = (s.start + kAttnChunk) / kAttnChunk;
                std::vector<float> pa(chunks * s.Hq * (s.D + 2)), pb(pa.size());
                ref->attention_chunks(a, pa.data(), 0, chunks);
                k->attention_chunks(a, pb.data(), 0, chunks);
                ++checks;
                for (size_t i = 0; i < pa.size(); ++i)
                    if (!(std::fabs(pa[i] - pb[i]) <= 1e-5f * (1.0f + std::fabs(pa[i])))) {
                        fail(std::string(k->name) + " attention_chunks D=" + std::to_string(s.D));
                        break;
                    }
            }
        }
}

void check_elementwise(const KernelTable *k, const KernelTable *ref) {
    for (int64_t n : {1, 7, 8, 9, 31, 100, 1001}) {
        std::vector<float> g(n), u(n), oa(n + 2, kSentinel), ob(n + 2, kSentinel);
        for (auto &v : g) v = rand_float(-20.0f, 20.0f);
        for (auto &v : u) v = rand_float(-3.0f, 3.0f);
        for (int which = 0; which < 2; ++which) {
            auto fn = [&](const KernelTable *t) { return which ? t->relu2_mul : t->silu_mul; };
            if (which && n >= 5) {  // gates the scalar compare maps to +0: NaN, -0; a subnormal
                g[1] = std::nanf("");
                g[2] = -0.0f;
                g[3] = 1e-45f;
            }
            fn(ref)(g.data(), u.data(), oa.data(), 1, n);
            fn(k)(g.data(), u.data(), ob.data(), 1, n);
            ++checks;
            for (int64_t i = 0; i < n + 2; ++i) {
                // relu2_mul: the scalar kernel's float64 arithmetic on every ISA, bit for bit
                const bool ok = i == 0 || i >= n ? ob[i] == kSentinel
                                : which ? std::memcmp(&oa[i], &ob[i], sizeof(float)) == 0
                                        : std::fabs(oa[i] - ob[i]) <= 1e-6f * (1.0f + std::fabs(oa[i]));
                if (!ok) {
                    fail(std::string(k->name) + (which ? " relu2_mul" : " silu_mul") + " n=" + std::to_string(n));
                    break;
                }
            }
        }
        std::vector<uint16_t> ha(n), hb(n);
        for (auto &v : g) v = rand_float(-70000.0f, 70000.0f) * (rand_int(0, 1) ? 1.0f : 1e-6f);
        ref->to_f16(g.data(), ha.data(), n);
        k->to_f16(g.data(), hb.data(), n);
        ++checks;
        if (ha != hb) fail(std::string(k->name) + " to_f16 n=" + std::to_string(n));
    }
    for (int64_t n : {0, 1, 15, 16, 63, 64, 65, 4095, 4096 * 64 + 17, 300000}) {
        std::vector<uint8_t> p(n);
        for (auto &b : p) b = n == 300000 ? 0xFF : static_cast<uint8_t>(rand_int(0, 255));
        uint64_t want = 0;
        for (uint8_t b : p) want += b;
        ++checks;
        if (ref->sum_bytes(p.data(), n) != want || k->sum_bytes(p.data(), n) != want)
            fail(std::string(k->name) + " sum_bytes n=" + std::to_string(n));
    }
}

void check_table(const KernelTable *k) {
    const KernelTable *ref = kernels_scalar();
    check_ternary(k, ref);
    check_quantize(k, ref);
    check_dense(k, ref);
    check_attention(k, ref);
    check_elementwise(k, ref);
}

}  // namespace

int main(int argc, char **argv) {
    std::string expect, isa = "neon";
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == "--expect") expect = argv[i + 1];
        if (std::string(argv[i]) == "--isa") isa = argv[i + 1];
    }
    const KernelTable *k = isa == "neon"     ? kernels_neon()
                           : isa == "avx2"   ? kernels_avx2()
                           : isa == "avx512" ? kernels_avx512()
                                             : nullptr;
    if (!k) {
        std::printf("no %s kernels in this build\n", isa.c_str());
        return 2;
    }
    if (isa == "neon")
        std::printf("kernels_neon(): %s (CPU has SDOT: %s)\n", k->name, cpu_has_dotprod() ? "yes" : "no");
    if (!expect.empty() && expect != k->name) {
        std::printf("FAIL expected the '%s' table, got '%s'\n", expect.c_str(), k->name);
        return 1;
    }
    check_table(k);
    std::printf("%s: %d checks, %d failures\n", k->name, checks, failures);
    return failures ? 1 : 0;
}
