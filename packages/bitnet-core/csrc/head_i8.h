// One row of a float table quantized to int8 with its absmax scale, and the
// sums that bound the error of the int8 head (tensors.h DenseI8). The row's
// values: float32, or float16 bits (converted exactly). An AVX2 + F16C path
// where the CPU has it (chosen at run time; same codes, scale, l1 and q2; the
// squared residual's sum may differ in its last bits, an upper bound either way).
#pragma once
#include <cstdint>

namespace bitnet {

struct I8Row {
    float scale = 1.0f;  // absmax / 127 (1 for an all-zero row)
    int32_t l1 = 0;      // sum |q|
    int64_t q2 = 0;      // sum q^2
    double a2 = 0.0;     // sum (w - scale q)^2, each residual exact in double
};

// f16: float16 bits [cols] (f32 ignored) or f32: floats [cols]; codes into o [cols]
I8Row quantize_row_i8(const uint16_t *f16, const float *f32, int64_t cols, int8_t *o);

float half_bits_to_float(uint16_t h);

}  // namespace bitnet
