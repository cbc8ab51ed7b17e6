// The files' ternary layouts read natively: llama.cpp / bitnet.cpp bytes into
// int8 codes, or straight into the kernels' i2_128 layout, row by row on the
// thread pool (unpack.cpp). The numpy codecs of bitnet_core.formats are the
// reference: a row these readers cannot take as the codec would (a code 3,
// differing scales, a non-finite tensor scale) makes the whole call fail with
// a reason, and the caller goes through the codec, which raises its own error.
#pragma once
#include <cstdint>
#include <string>

namespace bitnet {

enum class RawFormat { I2_S, TQ2_0, TQ1_0 };

// "i2_s", "tq2_0", "tq1_0"; false for any other name.
bool parse_raw_format(const std::string &name, RawFormat &fmt);

// Bytes a [rows, cols] tensor takes in fmt (-1: cols not a multiple of its block).
int64_t raw_nbytes(RawFormat fmt, int64_t rows, int64_t cols);

// Why a row was refused (0: it was not).
enum RowError { kRowOk = 0, kRowCode3 = 1, kRowScales = 2, kRowScaleNotFinite = 3, kRowZeroScaleCodes = 4 };
const char *row_error_text(int err);

// Bytes of one row of a [rows, cols] tensor in fmt (I2_S rows are whole blocks:
// cols % 128 == 0; the tensor's scale follows the last row).
int64_t raw_row_bytes(RawFormat fmt, int64_t cols);

// I2_S: the tensor's one scale from the 4 bytes after its rows (kRowScaleNotFinite
// if it is not finite).
int i2_s_scale(const uint8_t *trailer, float &scale);

// One row's bytes (raw_row_bytes of them) as int8 codes [cols] and the row's
// scale, by the codec's rules: a zero-scale block is all zero, the other
// blocks with a non-zero code share one scale (0 where none has one). I2_S
// rows leave `scale` alone (the tensor's, i2_s_scale).
int decode_row(RawFormat fmt, const uint8_t *row, int64_t cols, int8_t *codes, float &scale);

// One row in i2_128 bytes [cols / 4] without the int8 codes in between: I2_S
// bytes with their 2-bit fields reversed (out may be row: in place), TQ2_0's
// qs bytes as they are (zero-scale blocks as zero codes). TQ1_0 has none.
bool has_direct_i2(RawFormat fmt);
int repack_row_i2(RawFormat fmt, const uint8_t *row, int64_t cols, uint8_t *out, float &scale);

}  // namespace bitnet
