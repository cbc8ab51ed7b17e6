// The files' ternary layouts read natively (see unpack.h). Layouts, as the
// codecs of bitnet_core.formats document them:
// - I2_S (bitnet.cpp): the tensor row-major in 128-weight blocks of 32 bytes,
//   weight j + 32k of a block in byte j at bits 6 - 2k as value + 1; one
//   float32 scale after the rows * cols / 4 bytes;
// - TQ2_0 (llama.cpp): 256-weight blocks of 66 bytes, qs[64] then an f16 d;
//   weight 128j + 32l + m is (qs[32j + m] >> 2l) & 3, value + 1;
// - TQ1_0 (llama.cpp): 256-weight blocks of 54 bytes, qs[48], qh[4], f16 d;
//   five base-3 trits a byte, trit k of byte b is ((uint8)(b * 3^k) * 3) >> 8.
#include "unpack.h"

#include <cmath>
#include <cstring>

#include "kernels.h"
#include "tensors.h"

namespace bitnet {

namespace {

constexpr int64_t kBlock256 = 256;
constexpr int64_t kTQ1BlockBytes = 54;

float f16_at(const uint8_t *p) { return half_bits_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// One row's scale from its blocks (row_scales_from_blocks of the codecs):
// blocks with a non-zero code must share one scale, a NaN never matches.
struct RowScale {
    bool have = false;
    float scale = 0.0f;
    int err = kRowOk;
    void block(float d, bool live) {
        if (!live) return;
        if (std::isnan(d) || (have && d != scale)) err = kRowScales;
        have = true;
        scale = d;
    }
};

// the four 2-bit fields of each byte in reverse order
inline uint64_t reverse_fields(uint64_t w) {
    w = ((w & 0x0f0f0f0f0f0f0f0full) << 4) | ((w >> 4) & 0x0f0f0f0f0f0f0f0full);
    return ((w & 0x3333333333333333ull) << 2) | ((w >> 2) & 0x3333333333333333ull);
}

inline uint64_t load64(const uint8_t *p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

int tq1_trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = static_cast<uint8_t>(b * pow3[k]);
    return (q * 3) >> 8;
}

}  // namespace

bool parse_raw_format(const std::string &name, RawFormat &fmt) {
    if (name == "i2_s") fmt = RawFormat::I2_S;
    else if (name == "tq2_0") fmt = RawFormat::TQ2_0;
    else if (name == "tq1_0") fmt = RawFormat::TQ1_0;
    else return false;
    return true;
}

int64_t raw_nbytes(RawFormat fmt, int64_t rows, int64_t cols) {
    switch (fmt) {
        case RawFormat::I2_S: return cols % kI2Block ? -1 : rows * cols / 4 + 32;
        case RawFormat::TQ2_0: return cols % kBlock256 ? -1 : rows * (cols / kBlock256) * kTQ2BlockBytes;
        case RawFormat::TQ1_0: return cols % kBlock256 ? -1 : rows * (cols / kBlock256) * kTQ1BlockBytes;
    }
    return -1;
}

int64_t raw_row_bytes(RawFormat fmt, int64_t cols) {
    switch (fmt) {
        case RawFormat::I2_S: return cols / 4;
        case RawFormat::TQ2_0: return cols / kBlock256 * kTQ2BlockBytes;
        case RawFormat::TQ1_0: return cols / kBlock256 * kTQ1BlockBytes;
    }
    return 0;
}

int i2_s_scale(const uint8_t *trailer, float &scale) {
    std::memcpy(&scale, trailer, 4);
    return std::isfinite(scale) ? kRowOk : kRowScaleNotFinite;
}

const char *row_error_text(int err) {
    switch (err) {
        case kRowCode3: return "a 2-bit code 3";
        case kRowScales: return "a row with more than one block scale";
        case kRowScaleNotFinite: return "a tensor scale that is not finite";
        case kRowZeroScaleCodes: return "a zero-scale block with non-zero codes";
        default: return "";
    }
}

bool has_direct_i2(RawFormat fmt) { return fmt != RawFormat::TQ1_0; }

int repack_row_i2(RawFormat fmt, const uint8_t *row, int64_t cols, uint8_t *out, float &scale) {
    if (fmt == RawFormat::I2_S) {
        (void)scale;
        const int64_t n = cols / 4;  // a multiple of 32
        const uint8_t *in = row;
        uint64_t bad = 0;
        for (int64_t i = 0; i < n; i += 8) {
            const uint64_t w = load64(in + i);
            bad |= w & (w >> 1) & 0x5555555555555555ull;
            const uint64_t o = reverse_fields(w);
            std::memcpy(out + i, &o, 8);
        }
        return bad ? kRowCode3 : kRowOk;
    }
    if (fmt != RawFormat::TQ2_0) return kRowScales;
    const int64_t nb = cols / kBlock256;
    RowScale rs;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *blk = row + b * kTQ2BlockBytes;
        uint64_t bad = 0, live = 0;
        for (int i = 0; i < 64; i += 8) {
            const uint64_t w = load64(blk + i);
            bad |= w & (w >> 1) & 0x5555555555555555ull;
            live |= w ^ 0x5555555555555555ull;
        }
        if (bad) return kRowCode3;
        const float d = f16_at(blk + 64);
        if (d == 0.0f) {  // a zero scale makes the whole block zero
            std::memset(out + b * 64, 0x55, 64);
            continue;
        }
        std::memcpy(out + b * 64, blk, 64);
        rs.block(d, live != 0);
    }
    scale = rs.scale;
    return rs.err;
}

int decode_row(RawFormat fmt, const uint8_t *row, int64_t cols, int8_t *codes, float &scale) {
    if (fmt == RawFormat::I2_S) {
        const uint8_t *in = row;
        for (int64_t b = 0; b < cols / kI2Block; ++b) {
            const uint8_t *q = in + b * 32;
            int8_t *o = codes + b * kI2Block;
            for (int k = 0; k < 4; ++k)
                for (int j = 0; j < 32; ++j) {
                    const int u = (q[j] >> (6 - 2 * k)) & 3;
                    if (u == 3) return kRowCode3;
                    o[32 * k + j] = static_cast<int8_t>(u - 1);
                }
        }
        return kRowOk;
    }
    const int64_t nb = cols / kBlock256;
    RowScale rs;
    if (fmt == RawFormat::TQ2_0) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *blk = row + b * kTQ2BlockBytes;
            int8_t *o = codes + b * kBlock256;
            for (int j = 0; j < 2; ++j)
                for (int l = 0; l < 4; ++l)
                    for (int m = 0; m < 32; ++m) {
                        const int u = (blk[32 * j + m] >> (2 * l)) & 3;
                        if (u == 3) return kRowCode3;
                        o[128 * j + 32 * l + m] = static_cast<int8_t>(u - 1);
                    }
            const float d = f16_at(blk + 64);
            bool live = false;
            for (int i = 0; i < kBlock256; ++i) live |= o[i] != 0;
            if (d == 0.0f) std::memset(o, 0, kBlock256);
            else rs.block(d, live);
        }
    } else {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *blk = row + b * kTQ1BlockBytes;
            int8_t *o = codes + b * kBlock256;
            for (int k = 0; k < 5; ++k)
                for (int j = 0; j < 32; ++j) o[32 * k + j] = static_cast<int8_t>(tq1_trit(blk[j], k) - 1);
            for (int k = 0; k < 5; ++k)
                for (int j = 0; j < 16; ++j)
                    o[160 + 16 * k + j] = static_cast<int8_t>(tq1_trit(blk[32 + j], k) - 1);
            for (int k = 0; k < 4; ++k)
                for (int j = 0; j < 4; ++j)
                    o[240 + 4 * k + j] = static_cast<int8_t>(tq1_trit(blk[48 + j], k) - 1);
            const float d = f16_at(blk + 52);
            bool live = false;
            for (int i = 0; i < kBlock256; ++i) live |= o[i] != 0;
            if (d == 0.0f) std::memset(o, 0, kBlock256);
            else rs.block(d, live);
        }
    }
    scale = rs.scale;
    return rs.err;
}

}  // namespace bitnet
