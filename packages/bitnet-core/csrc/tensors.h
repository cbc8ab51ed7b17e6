// Weights as the CPU kernels keep them: packed ternary matrices and the int8
// copy of a dense table. Built from numpy arrays (tensors.cpp), read by the
// op bindings (ops.cpp) and the fused model (model.cpp).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"
#include "weight_arena.h"

namespace bitnet {

namespace py = pybind11;

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A ternary weight [rows, cols] packed for the kernels: our own copy in the
// i2_128 or tq1_160 layout, or llama.cpp TQ2_0 bytes (copied as they are, or
// used in place where weights do not go to huge pages).
struct TernaryMatrix {
    std::string name, layout;
    int64_t rows = 0, cols = 0, kp = 0, row_bytes = 0;
    Buffer data;               // our copy (weight_buffer)
    py::object keep;           // or the file's bytes (tq2_0 in place), kept alive here
    const uint8_t *ptr = nullptr;
    std::vector<float> scales;

    size_t nbytes() const { return static_cast<size_t>(rows * row_bytes); }
    bool i2_blocks() const { return layout != "tq1_160"; }
    bool tq2() const { return layout == "tq2_0"; }

    static std::shared_ptr<TernaryMatrix> from_tq2_0(py::array raw, int64_t rows, int64_t cols,
                                                     const std::string &name);
    static std::shared_ptr<TernaryMatrix> from_codes(CArray<int8_t> codes, CArray<float> scales,
                                                     const std::string &layout,
                                                     const std::string &name);
    // a file's bytes in a layout unpack.h reads, straight into `layout`
    static std::shared_ptr<TernaryMatrix> from_raw(const std::string &format, py::array raw, int64_t rows,
                                                   int64_t cols, const std::string &layout,
                                                   const std::string &name, py::object factor, int threads);
    // the same from the tensor's bytes at `offset` of a file, read with pread
    static std::shared_ptr<TernaryMatrix> from_file(const std::string &format, const std::string &path,
                                                    int64_t offset, int64_t rows, int64_t cols,
                                                    const std::string &layout, const std::string &name,
                                                    py::object factor, int threads);
    py::array_t<int8_t> codes() const;
    void unpack_row(int64_t r, int8_t *o) const;
};

// A dense table [rows, cols] as int8 rows (padded to a multiple of 32
// columns) with per-row absmax scales: the int8 output head. A row r stands
// for the float row w_r = scales[r] * q_r + a_r with |a_r| <= scales[r] / 2
// elementwise. What bounds the head's error (see Compute::dense_i8_checked):
// l1[r] = sum |q_r|, qnorm[r] = |q_r|_2 and anorm[r] = |a_r|_2 / scales[r]
// (both rounded up).
struct DenseI8 {
    int64_t rows = 0, cols = 0, stride = 0;
    Buffer data;
    std::vector<float> scales;
    std::vector<int32_t> l1;
    std::vector<float> qnorm, anorm;
    // the largest scales[r] and scales[r] * l1[r] over every row, filled or not
    // (Compute::dense_i8_checked bounds every row's error by them at once)
    double scale_max = 0.0, scale_l1_max = 0.0;
    size_t nbytes() const { return static_cast<size_t>(rows * stride); }
    const int8_t *row(int64_t r) const { return reinterpret_cast<const int8_t *>(data.get()) + r * stride; }
};

// From a float16 or float32 table, one row at a time (no float32 copy of a
// float16 table is made).
std::shared_ptr<DenseI8> dense_i8_from(py::array table);
// An all-zero table of rows x cols, to fill a block of rows at a time (fill_rows).
std::shared_ptr<DenseI8> dense_i8_empty(int64_t rows, int64_t cols);
// Rows [start, start + block rows) from a float16 or float32 block [n, cols].
void dense_i8_fill_rows(DenseI8 &d, int64_t start, py::array block);

// Every row of a float16 (f16) or float32 table stored at `offset` of a file,
// read with pread on the thread pool (threads 0: all).
void dense_i8_fill_file(DenseI8 &d, const std::string &path, int64_t offset, bool f16, int threads);

// Files read with pread (weights copied out of a file need no mapping of it):
// a descriptor (-1: cannot), n bytes at offset (false: a short read or error).
int open_file(const std::string &path);
void close_file(int fd);
bool read_at(int fd, int64_t offset, uint8_t *out, int64_t n);

// `a` is float16 / float32 (numpy's equivalence: not object identity, since a
// dtype made elsewhere, e.g. by gguf-py's reader, is not numpy's own instance)
bool is_half(const py::dtype &a);
bool is_float(const py::dtype &a);

// float16 bits -> float (exact)
float half_bits_to_float(uint16_t h);

// `a` C-contiguous as float16 bits (uint16; sets f16) or as float32 (any other
// dtype converted); copied only where it is not so already. Null if it cannot be.
py::array half_or_float(py::array a, bool &f16);

void register_tensors(py::module_ &m);

}  // namespace bitnet
