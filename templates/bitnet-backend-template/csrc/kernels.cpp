// The C++ kernels of bitnet-template, exposed to Python through pybind11.
//
// The worked example: one op of the KernelProvider protocol in plain C++.
// Numerics follow the contract in bitnet_core/hal/provider.py exactly:
// integer accumulation for matmul_i2s, so the results match bitnet_core's
// numpy reference (ReferenceProvider). Arguments are validated once by the
// SDK (bitnet_core.sdk.checks) before the op runs; the checks here only guard
// memory safety and raise ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

namespace py = pybind11;

template <typename T>
using carray = py::array_t<T, py::array::c_style | py::array::forcecast>;

// y[t, n] = (sum_k xq[t, k] * code[n, k]) * scales[n] / xscale[t]
// `packed` is the canonical I2 layout (bitnet_core.hal.weights.pack_i2):
// row n holds ceil(cols / 4) bytes, column 4j + i in bits 2i..2i+1 as code + 1.
static carray<float> matmul_i2s(carray<int8_t> xq, carray<float> xscale, carray<uint8_t> packed,
                                carray<float> scales, int64_t cols) {
    if (xq.ndim() != 2 || packed.ndim() != 2 || xscale.ndim() != 1 || scales.ndim() != 1)
        throw std::invalid_argument("matmul_i2s: xq [T, K], xscale [T], packed [N, B], scales [N]");
    const int64_t t_count = xq.shape(0), k_count = xq.shape(1);
    const int64_t n_count = packed.shape(0), row_bytes = packed.shape(1);
    if (k_count != cols || row_bytes != (cols + 3) / 4 || xscale.shape(0) != t_count ||
        scales.shape(0) != n_count)
        throw std::invalid_argument("matmul_i2s: inconsistent shapes");

    carray<float> out({t_count, n_count});
    const int8_t* x = xq.data();
    const float* xs = xscale.data();
    const uint8_t* w = packed.data();
    const float* sc = scales.data();
    float* y = out.mutable_data();
    {
        py::gil_scoped_release release;  // other Python threads may run meanwhile
        for (int64_t t = 0; t < t_count; ++t) {
            const int8_t* xr = x + t * k_count;
            for (int64_t n = 0; n < n_count; ++n) {
                const uint8_t* wr = w + n * row_bytes;
                int32_t acc = 0;
                int64_t k = 0;
                for (; k + 4 <= k_count; k += 4) {  // four codes per byte
                    const uint8_t b = wr[k >> 2];
                    acc += xr[k] * ((b & 3) - 1) + xr[k + 1] * (((b >> 2) & 3) - 1) +
                           xr[k + 2] * (((b >> 4) & 3) - 1) + xr[k + 3] * (((b >> 6) & 3) - 1);
                }
                for (; k < k_count; ++k)  // the tail: K need not be a multiple of 4
                    acc += xr[k] * (((wr[k >> 2] >> (2 * (k & 3))) & 3) - 1);
                y[t * n_count + n] =
                    static_cast<float>(static_cast<double>(acc) * sc[n] / static_cast<double>(xs[t]));
            }
        }
    }
    return out;
}

PYBIND11_MODULE(_kernels, m) {
    m.doc() = "bitnet-template C++ kernels (the worked example of a backend)";
    m.def("matmul_i2s", &matmul_i2s, py::arg("xq"), py::arg("xscale"), py::arg("packed"),
          py::arg("scales"), py::arg("cols"));
}
