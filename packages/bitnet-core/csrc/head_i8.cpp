// The int8 head's rows (see head_i8.h).
#include "head_i8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BITNET_HEAD_AVX2 1
#endif

namespace bitnet {

namespace {

// every float16 bit pattern as a float (exact)
const float *half_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(1 << 16);
        for (uint32_t h = 0; h < t.size(); ++h) t[h] = half_bits_to_float(static_cast<uint16_t>(h));
        return t;
    }();
    return table.data();
}

// nearbyint(t) for |t| < 2^22 in the default rounding mode (ties to even), with no
// libm call, so the loop around it vectorizes
inline float round_even(float t) {
    constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
    return (t + kMagic) - kMagic;
}

// the largest |h| of float16 bits as bits (they order like the values); NaN skipped
uint16_t half_absmax_bits(const uint16_t *h, int64_t c0, int64_t cols, uint16_t hmax) {
    for (int64_t c = c0; c < cols; ++c) {
        const uint16_t m = h[c] & 0x7fff;
        hmax = std::max<uint16_t>(hmax, m > 0x7c00 ? 0 : m);
    }
    return hmax;
}

float scale_of(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }

int8_t quantize(float w, float s) {
    return static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, round_even(w / s))));
}

// columns [c0, cols) of a row (x: their floats, from column c0) into o and the sums;
// a2 in 8 lanes by column
void quantize_tail(const float *x, int64_t c0, int64_t cols, float s, int8_t *o, I8Row &r, double a2[8]) {
    const double sd = s;
    for (int64_t c = c0; c < cols; ++c) {
        const float w = x[c - c0];
        const int8_t q = quantize(w, s);
        o[c] = q;
        r.l1 += std::abs(static_cast<int32_t>(q));
        r.q2 += static_cast<int64_t>(q) * q;
        const double a = static_cast<double>(w) - sd * q;
        a2[c & 7] += a * a;
    }
}

double lanes_sum(const double a2[8]) {
    const double l0 = a2[0] + a2[4], l1 = a2[1] + a2[5], l2 = a2[2] + a2[6], l3 = a2[3] + a2[7];
    return (l0 + l1) + (l2 + l3);
}

#ifdef BITNET_HEAD_AVX2
bool have_avx2() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return yes;
}

__attribute__((target("avx2,f16c"))) I8Row row_f16_avx2(const uint16_t *h, int64_t cols, int8_t *o) {
    I8Row r;
    const int64_t c16 = cols / 16 * 16, c8 = cols / 8 * 8;
    __m256i hm = _mm256_setzero_si256();
    const __m256i abs_mask = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(0x7c00);
    for (int64_t c = 0; c < c16; c += 16) {
        __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + c)), abs_mask);
        m = _mm256_andnot_si256(_mm256_cmpgt_epi16(m, inf), m);  // NaN -> 0
        hm = _mm256_max_epi16(hm, m);
    }
    alignas(32) uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), hm);
    uint16_t hmax = half_absmax_bits(h, c16, cols, 0);
    for (uint16_t v : lanes) hmax = std::max(hmax, v);
    const float s = scale_of(half_bits_to_float(hmax));
    r.scale = s;
    const __m256 vs = _mm256_set1_ps(s), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    const __m256d sd = _mm256_set1_pd(s);
    __m256i l1 = _mm256_setzero_si256(), q2 = _mm256_setzero_si256();
    __m256d a2lo = _mm256_setzero_pd(), a2hi = _mm256_setzero_pd();
    for (int64_t c = 0; c < c8; c += 8) {
        const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + c)));
        __m256 t = _mm256_round_ps(_mm256_div_ps(x, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        t = _mm256_max_ps(_mm256_min_ps(t, hi), lo);  // a NaN becomes 127, as the scalar path
        const __m256i q = _mm256_cvttps_epi32(t);
        const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i *>(o + c), _mm_packs_epi16(q16, q16));
        l1 = _mm256_add_epi32(l1, _mm256_abs_epi32(q));
        q2 = _mm256_add_epi32(q2, _mm256_mullo_epi32(q, q));
        const __m256d alo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)),
                                          _mm256_mul_pd(sd, _mm256_cvtps_pd(_mm256_castps256_ps128(t))));
        const __m256d ahi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)),
                                          _mm256_mul_pd(sd, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1))));
        a2lo = _mm256_add_pd(a2lo, _mm256_mul_pd(alo, alo));
        a2hi = _mm256_add_pd(a2hi, _mm256_mul_pd(ahi, ahi));
    }
    alignas(32) int32_t il1[8], iq2[8];
    _mm256_store_si256(reinterpret_cast<__m256i *>(il1), l1);
    _mm256_store_si256(reinterpret_cast<__m256i *>(iq2), q2);
    for (int k = 0; k < 8; ++k) {
        r.l1 += il1[k];
        r.q2 += iq2[k];
    }
    alignas(32) double a2[8];
    _mm256_store_pd(a2, a2lo);
    _mm256_store_pd(a2 + 4, a2hi);
    float tail[8];
    for (int64_t c = c8; c < cols; ++c) tail[c - c8] = half_bits_to_float(h[c]);
    quantize_tail(tail, c8, cols, s, o, r, a2);
    r.a2 = lanes_sum(a2);
    return r;
}
#endif

}  // namespace

I8Row quantize_row_i8(const uint16_t *f16, const float *f32, int64_t cols, int8_t *o) {
#ifdef BITNET_HEAD_AVX2
    // int32 lanes hold l1 and q2 of rows up to 2^20 columns
    if (f16 && have_avx2() && cols <= (int64_t{1} << 20)) return row_f16_avx2(f16, cols, o);
#endif
    I8Row r;
    std::vector<float> buf;
    float amax = 0.0f;
    const float *x = f32;
    if (f16) {
        const float *half = half_table();
        buf.resize(static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c) buf[c] = half[f16[c]];
        amax = half[half_absmax_bits(f16, 0, cols, 0)];
        x = buf.data();
    } else {
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[c]));
    }
    r.scale = scale_of(amax);
    double a2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    quantize_tail(x, 0, cols, r.scale, o, r, a2);
    r.a2 = lanes_sum(a2);
    return r;
}

}  // namespace bitnet
