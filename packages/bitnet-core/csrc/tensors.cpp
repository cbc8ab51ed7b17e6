// Packed weights of the CPU kernels (see tensors.h) and their Python bindings.
#include "tensors.h"

#include "head_i8.h"
#include "threadpool.h"
#include "unpack.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

#ifndef _WIN32
#include <fcntl.h>
#include <unistd.h>
#endif

namespace bitnet {

float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, e = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (e == 31) bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
    else if (e) bits = sign | ((e + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
    else {  // zero, subnormal: man * 2^-24, exact in float
        const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
        std::memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

namespace {
bool equivalent(const py::dtype &a, const py::dtype &b) {
    return py::detail::npy_api::get().PyArray_EquivTypes_(a.ptr(), b.ptr());
}
}  // namespace

bool is_half(const py::dtype &a) { return equivalent(a, py::dtype("float16")); }
bool is_float(const py::dtype &a) { return equivalent(a, py::dtype::of<float>()); }

py::array half_or_float(py::array a, bool &f16) {
    f16 = is_half(a.dtype());
    if (f16) return CArray<uint16_t>::ensure(a.attr("view")("uint16"));
    return CArray<float>::ensure(a);
}

int open_file(const std::string &path) {
#ifdef _WIN32
    (void)path;
    return -1;
#else
    return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
#endif
}

void close_file(int fd) {
#ifndef _WIN32
    if (fd >= 0) ::close(fd);
#endif
}

bool read_at(int fd, int64_t offset, uint8_t *out, int64_t n) {
#ifdef _WIN32
    (void)fd, (void)offset, (void)out, (void)n;
    return false;
#else
    while (n > 0) {
        const ssize_t got = ::pread(fd, out, static_cast<size_t>(n), static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        out += got;
        offset += got;
        n -= got;
    }
    return true;
#endif
}

namespace {
// One TQ2_0 row's scale (the codec's rule, see from_tq2_0), or err set to 1 (a
// code 3), 2 (a zero-scale block with non-zero codes) or 3 (differing scales).
float tq2_row_scale(const uint8_t *row, int64_t nblocks, int &err) {
    bool have = false;
    float scale = 0.0f;
    for (int64_t blk = 0; blk < nblocks; ++blk) {
        const uint8_t *b = row + blk * kTQ2BlockBytes;
        // eight bytes at a time: a 2-bit field of 3 is not ternary; 1 is a zero weight
        constexpr uint64_t kLow = 0x5555555555555555ull;
        uint64_t three = 0, nonzero = 0;
        for (int j = 0; j < 64; j += 8) {
            uint64_t w;
            std::memcpy(&w, b + j, sizeof w);
            three |= w & (w >> 1) & kLow;
            nonzero |= w ^ kLow;
        }
        if (three) err = 1;
        const bool live = nonzero != 0;
        const float d = half_bits_to_float(static_cast<uint16_t>(b[64] | (b[65] << 8)));
        if (d == 0.0f) {
            if (live) err = 2;
            continue;
        }
        if (!live) continue;
        if (have && d != scale) err = 3;
        have = true;
        scale = d;
    }
    return scale;
}
}  // namespace

// llama.cpp TQ2_0 bytes, copied as they are into huge-page memory (or used in
// place where there is none: no copy): same bit layout as i2_128
// inside 66-byte blocks. The scales follow the reference codec's rule: one
// per row, from the blocks with a non-zero scale and a non-zero code, which
// must all agree. Raises ValueError where the bytes cannot be used as they
// are (code 3, a zero-scale block with non-zero codes, differing scales):
// the caller then goes through the codec.
std::shared_ptr<TernaryMatrix> TernaryMatrix::from_tq2_0(py::array raw, int64_t rows, int64_t cols,
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
    if (huge_page_weights()) {  // a copy in huge pages: decode reads it per token, see weight_arena.h
        m->data = weight_buffer(m->nbytes());
        m->ptr = m->data.get();
    } else {
        m->keep = bytes;
        m->ptr = bytes.data();
    }
    m->scales.assign(rows, 0.0f);
    // rows in parallel: a 2B model's 0.5 GB is copied and read here at load
    struct Ctx {
        const uint8_t *src;
        TernaryMatrix *m;
        std::atomic<int> err{0};
    } ctx{bytes.data(), m.get()};
    {
        py::gil_scoped_release nogil;
        parallel_for(rows, 64, 0, [](void *c, int64_t r0, int64_t r1) {
            auto *x = static_cast<Ctx *>(c);
            TernaryMatrix &w = *x->m;
            if (w.data)
                std::memcpy(w.data.get() + r0 * w.row_bytes, x->src + r0 * w.row_bytes,
                            static_cast<size_t>((r1 - r0) * w.row_bytes));
            for (int64_t r = r0; r < r1 && !x->err.load(std::memory_order_relaxed); ++r) {
                int e = 0;
                w.scales[r] = tq2_row_scale(w.ptr + r * w.row_bytes, w.cols / 256, e);
                int none = 0;
                if (e) x->err.compare_exchange_strong(none, e);
            }
        }, &ctx);
    }
    if (const int e = ctx.err.load()) {
        static const char *const why[] = {"", "code 3", "a zero-scale block with non-zero codes",
                                          "rows with more than one scale"};
        throw std::invalid_argument(name + ": TQ2_0 data not usable in place (" + why[e] + ")");
    }
    return m;
}

namespace {

// m's kp and row_bytes for `layout` (i2_128 or tq1_160), and its buffer
void init_layout(TernaryMatrix &m, const std::string &layout) {
    m.layout = layout;
    if (layout == "i2_128") {
        m.kp = round_up(std::max<int64_t>(m.cols, 1), kI2Block);
        m.row_bytes = m.kp / 4;
    } else if (layout == "tq1_160") {
        m.kp = round_up(std::max<int64_t>(m.cols, 1), kTQ1Block);
        m.row_bytes = m.kp / kTQ1Block * 32;
    } else if (layout == "tq2_0" && m.cols % 256 == 0) {  // from_file: TQ2_0 bytes as they are
        m.kp = m.cols;
        m.row_bytes = m.cols / 256 * kTQ2BlockBytes;
    } else {
        throw std::invalid_argument("unknown ternary layout '" + layout + "' (i2_128, tq1_160)");
    }
    m.data = weight_buffer(m.nbytes());
    m.ptr = m.data.get();
}

// one row of codes [cols] into m's layout at out; false if a code is not ternary
bool pack_row(const TernaryMatrix &m, const int8_t *cr, uint8_t *out) {
    bool bad = false;
    auto code = [&](int64_t col) -> int {
        if (col >= m.cols) return 1;
        int v = cr[col];
        if (v < -1 || v > 1) bad = true;
        return v + 1;
    };
    if (m.layout == "i2_128") {
        for (int64_t b = 0; b < m.kp / kI2Block; ++b)
            for (int j = 0; j < 32; ++j) {
                int byte = 0;
                for (int i = 0; i < 4; ++i) byte |= code(b * kI2Block + 32 * i + j) << (2 * i);
                out[b * 32 + j] = static_cast<uint8_t>(byte);
            }
    } else {
        for (int64_t b = 0; b < m.kp / kTQ1Block; ++b)
            for (int j = 0; j < 32; ++j) {
                int v = 0;
                for (int i = 0; i < 5; ++i) v = v * 3 + code(b * kTQ1Block + 32 * i + j);
                int q = (v * 256 + 242) / 243;
                out[b * 32 + j] = static_cast<uint8_t>(q ^ 0x80);
            }
    }
    return !bad;
}

}  // namespace

std::shared_ptr<TernaryMatrix> TernaryMatrix::from_codes(CArray<int8_t> codes, CArray<float> scales,
                                                         const std::string &layout,
                                                         const std::string &name) {
    if (codes.ndim() != 2) throw std::invalid_argument(name + ": ternary codes must be 2-D");
    auto m = std::make_shared<TernaryMatrix>();
    m->name = name;
    m->rows = codes.shape(0);
    m->cols = codes.shape(1);
    if (scales.ndim() != 1 || scales.shape(0) != m->rows)
        throw std::invalid_argument(name + ": need one scale per row");
    init_layout(*m, layout);
    m->scales.assign(scales.data(), scales.data() + m->rows);
    struct Ctx {
        const int8_t *codes;
        TernaryMatrix *m;
        std::atomic<bool> bad{false};
    } ctx{codes.data(), m.get()};
    {
        py::gil_scoped_release nogil;
        parallel_for(m->rows, 64, 0, [](void *c, int64_t r0, int64_t r1) {
            auto *x = static_cast<Ctx *>(c);
            const TernaryMatrix &w = *x->m;
            for (int64_t r = r0; r < r1; ++r)
                if (!pack_row(w, x->codes + r * w.cols, w.data.get() + r * w.row_bytes))
                    x->bad.store(true, std::memory_order_relaxed);
        }, &ctx);
    }
    if (ctx.bad.load()) throw std::domain_error(name + ": ternary codes must be in {-1, 0, +1}");
    return m;
}

namespace {

// Where a [rows, cols] tensor's bytes come from: memory (`data`), or a file at
// `offset` read with pread (no mapping: nothing to fault in, nothing to let go).
struct RawSource {
    RawFormat fmt = RawFormat::I2_S;
    int64_t rows = 0, cols = 0, row_bytes = 0;
    const uint8_t *data = nullptr;
    int fd = -1;
    int64_t offset = 0;

    // bytes [at, at + n) of the tensor, read into buf if it is in a file; null on a short read
    const uint8_t *bytes(int64_t at, int64_t n, std::vector<uint8_t> &buf) const {
        if (data) return data + at;
        buf.resize(static_cast<size_t>(n));
        return read_at(fd, offset + at, buf.data(), n) ? buf.data() : nullptr;
    }
};

struct FileCloser {
    int fd = -1;
    ~FileCloser() { close_file(fd); }
};

RawSource raw_source(const std::string &format, int64_t rows, int64_t cols, const std::string &name) {
    RawSource src;
    if (!parse_raw_format(format, src.fmt))
        throw std::invalid_argument(name + ": no native reader for '" + format + "' (i2_s, tq2_0, tq1_0)");
    if (rows <= 0 || raw_nbytes(src.fmt, rows, cols) < 0)
        throw std::invalid_argument(name + ": " + format + " data does not fit the shape");
    src.rows = rows;
    src.cols = cols;
    src.row_bytes = raw_row_bytes(src.fmt, cols);
    return src;
}

// `raw` as the C-contiguous bytes of a [rows, cols] tensor in `format`
RawSource memory_source(const std::string &format, const CArray<uint8_t> &bytes, int64_t rows, int64_t cols,
                        const std::string &name) {
    RawSource src = raw_source(format, rows, cols, name);
    if (!bytes || bytes.size() < raw_nbytes(src.fmt, rows, cols))
        throw std::invalid_argument(name + ": " + format + " data does not fit the shape");
    src.data = bytes.data();
    return src;
}

// the per-row scale factor of llama.cpp's blk.N.<name>.scale tensors: 1 or rows values
void apply_factor(std::vector<float> &scales, const py::object &factor, const std::string &name) {
    if (factor.is_none()) return;
    auto f = CArray<float>::ensure(factor);
    const int64_t n = f ? f.size() : -1;
    const int64_t rows = static_cast<int64_t>(scales.size());
    if (n != 1 && n != rows) throw std::invalid_argument(name + ": the scale factor does not fit the rows");
    for (int64_t r = 0; r < rows; ++r) scales[r] *= f.data()[n == 1 ? 0 : r];
}

struct RawCtx {
    RawSource src;
    TernaryMatrix *m = nullptr;  // from_raw / from_file: pack into m
    int8_t *codes = nullptr;     // unpack_raw: codes [rows, cols] here
    float *scales = nullptr;     // [rows]
    std::atomic<int> err{kRowOk};
    void fail(int e) {
        int none = kRowOk;
        err.compare_exchange_strong(none, e);
    }
};

constexpr int kShortRead = 100;  // a file shorter than its header says

void raw_rows(void *c, int64_t r0, int64_t r1) {
    auto *x = static_cast<RawCtx *>(c);
    const RawSource &src = x->src;
    if (x->err.load(std::memory_order_relaxed)) return;
    // kept by each thread: a fresh 256 KiB buffer a chunk would be mapped, faulted in
    // and unmapped again each time
    thread_local std::vector<uint8_t> buf;
    thread_local std::vector<int8_t> codes;
    const uint8_t *in = src.bytes(r0 * src.row_bytes, (r1 - r0) * src.row_bytes, buf);
    if (!in) return x->fail(kShortRead);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = in + (r - r0) * src.row_bytes;
        int e = kRowOk;
        if (!x->m) {
            e = decode_row(src.fmt, row, src.cols, x->codes + r * src.cols, x->scales[r]);
        } else if (x->m->tq2()) {  // the bytes as they are, scales by from_tq2_0's rule
            std::memcpy(x->m->data.get() + r * x->m->row_bytes, row, static_cast<size_t>(src.row_bytes));
            x->scales[r] = tq2_row_scale(row, src.cols / 256, e);
            static const int why[] = {kRowOk, kRowCode3, kRowZeroScaleCodes, kRowScales};
            e = why[e];
        } else if (x->m->layout == "i2_128" && has_direct_i2(src.fmt)) {
            e = repack_row_i2(src.fmt, row, src.cols, x->m->data.get() + r * x->m->row_bytes, x->scales[r]);
        } else {
            codes.resize(static_cast<size_t>(src.cols));
            e = decode_row(src.fmt, row, src.cols, codes.data(), x->scales[r]);
            if (!e) pack_row(*x->m, codes.data(), x->m->data.get() + r * x->m->row_bytes);
        }
        if (e) return x->fail(e);
    }
}

// every row of ctx.src, about 256 KiB of the source a chunk
void run_raw_rows(RawCtx &ctx, int threads, const std::string &name) {
    const RawSource &src = ctx.src;
    int err = kRowOk;
    {
        py::gil_scoped_release nogil;
        if (src.fmt == RawFormat::I2_S) {  // every row takes the tensor's one scale
            std::vector<uint8_t> buf;
            float scale = 0.0f;
            const uint8_t *trailer = src.bytes(src.rows * src.row_bytes, 4, buf);
            err = !trailer ? kShortRead : i2_s_scale(trailer, scale);
            std::fill(ctx.scales, ctx.scales + src.rows, scale);
        }
        if (!err) {
            const int64_t grain = std::max<int64_t>(1, (int64_t{256} << 10) / src.row_bytes);
            parallel_for(src.rows, grain, threads, raw_rows, &ctx);
            err = ctx.err.load();
        }
    }
    if (err == kShortRead) throw std::invalid_argument(name + ": the file is shorter than its tensor");
    if (err) throw std::invalid_argument(name + ": not read natively (" + row_error_text(err) + ")");
}

std::shared_ptr<TernaryMatrix> matrix_from(RawCtx &ctx, const std::string &layout, const std::string &name,
                                           const py::object &factor, int threads) {
    if (layout == "tq2_0" && ctx.src.fmt != RawFormat::TQ2_0)
        throw std::invalid_argument(name + ": only TQ2_0 data goes to the tq2_0 layout");
    auto m = std::make_shared<TernaryMatrix>();
    m->name = name;
    m->rows = ctx.src.rows;
    m->cols = ctx.src.cols;
    init_layout(*m, layout);
    m->scales.assign(m->rows, 0.0f);
    ctx.m = m.get();
    ctx.scales = m->scales.data();
    run_raw_rows(ctx, threads, name);
    apply_factor(m->scales, factor, name);
    return m;
}

}  // namespace

std::shared_ptr<TernaryMatrix> TernaryMatrix::from_raw(const std::string &format, py::array raw, int64_t rows,
                                                       int64_t cols, const std::string &layout,
                                                       const std::string &name, py::object factor,
                                                       int threads) {
    auto bytes = CArray<uint8_t>::ensure(raw);
    RawCtx ctx;
    ctx.src = memory_source(format, bytes, rows, cols, name);
    return matrix_from(ctx, layout, name, factor, threads);
}

std::shared_ptr<TernaryMatrix> TernaryMatrix::from_file(const std::string &format, const std::string &path,
                                                        int64_t offset, int64_t rows, int64_t cols,
                                                        const std::string &layout, const std::string &name,
                                                        py::object factor, int threads) {
    RawCtx ctx;
    ctx.src = raw_source(format, rows, cols, name);
    FileCloser file{open_file(path)};
    if (file.fd < 0 || offset < 0) throw std::invalid_argument(name + ": cannot read " + path);
    ctx.src.fd = file.fd;
    ctx.src.offset = offset;
    return matrix_from(ctx, layout, name, factor, threads);
}

py::tuple unpack_raw(const std::string &format, py::array raw, int64_t rows, int64_t cols, int threads) {
    auto bytes = CArray<uint8_t>::ensure(raw);
    RawCtx ctx;
    ctx.src = memory_source(format, bytes, rows, cols, format);
    py::array_t<int8_t> codes({rows, cols});
    py::array_t<float> scales(static_cast<py::ssize_t>(rows));
    ctx.codes = codes.mutable_data();
    ctx.scales = scales.mutable_data();
    run_raw_rows(ctx, threads, format);
    return py::make_tuple(codes, scales);
}

py::array_t<int8_t> TernaryMatrix::codes() const {
    py::array_t<int8_t> out({rows, cols});
    int8_t *o = out.mutable_data();
    for (int64_t r = 0; r < rows; ++r) unpack_row(r, o + r * cols);
    return out;
}

void TernaryMatrix::unpack_row(int64_t r, int8_t *o) const {
    const uint8_t *w = ptr + r * row_bytes;
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const bool is_tq2 = tq2();
    for (int64_t c = 0; c < cols; ++c) {
        if (i2_blocks()) {
            int64_t b = c / kI2Block, i = (c % kI2Block) / 32, j = c % 32;
            o[c] = static_cast<int8_t>(((i2_block(w, b, is_tq2)[j] >> (2 * i)) & 3) - 1);
        } else {
            int64_t b = c / kTQ1Block, i = (c % kTQ1Block) / 32, j = c % 32;
            uint8_t q = static_cast<uint8_t>((w[b * 32 + j] ^ 0x80) * pow3[i]);
            o[c] = static_cast<int8_t>(((q * 3) >> 8) - 1);
        }
    }
}

namespace {

// v as a float no smaller than v (and a little above: the norms' double sums round too)
float round_up_float(double v) {
    return std::nextafter(static_cast<float>(v * (1.0 + 1e-9)), INFINITY);
}

// the table's largest scale and scale x l1, over every row (filled or not)
void update_maxima(DenseI8 &d) {
    d.scale_max = d.scale_l1_max = 0.0;
    for (int64_t r = 0; r < d.rows; ++r) {
        const double s = d.scales[r];
        d.scale_max = std::max(d.scale_max, s);
        d.scale_l1_max = std::max(d.scale_l1_max, s * d.l1[r]);
    }
}

}  // namespace

std::shared_ptr<DenseI8> dense_i8_empty(int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) throw std::invalid_argument("dense table: negative shape");
    auto d = std::make_shared<DenseI8>();
    d->rows = rows;
    d->cols = cols;
    d->stride = round_up(std::max<int64_t>(cols, 1), 32);
    d->data = weight_buffer(d->nbytes());
    d->scales.assign(rows, 1.0f);
    d->l1.assign(rows, 0);
    d->qnorm.assign(rows, 0.0f);
    // a row not filled stands for anything within half a scale of zero
    d->anorm.assign(rows, round_up_float(0.5 * std::sqrt(static_cast<double>(cols))));
    update_maxima(*d);
    return d;
}

namespace {

// rows i0 .. i1 of a float16 (bits) or float32 block [n, d.cols] into rows start + i of d
void fill_i8_rows(DenseI8 &d, const void *src, bool f16, int64_t start, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        int8_t *o = reinterpret_cast<int8_t *>(d.data.get()) + (start + i) * d.stride;
        const I8Row r = f16 ? quantize_row_i8(static_cast<const uint16_t *>(src) + i * d.cols, nullptr, d.cols, o)
                            : quantize_row_i8(nullptr, static_cast<const float *>(src) + i * d.cols, d.cols, o);
        d.scales[start + i] = r.scale;
        d.l1[start + i] = r.l1;
        d.qnorm[start + i] = round_up_float(std::sqrt(static_cast<double>(r.q2)));
        d.anorm[start + i] = round_up_float(std::sqrt(r.a2) / static_cast<double>(r.scale));
    }
}

}  // namespace

void dense_i8_fill_rows(DenseI8 &d, int64_t start, py::array block) {
    if (block.ndim() != 2 || block.shape(1) != d.cols)
        throw std::invalid_argument("dense table rows do not match the table's columns");
    const int64_t n = block.shape(0);
    if (start < 0 || start + n > d.rows) throw std::invalid_argument("dense table rows out of range");
    bool f16 = false;
    py::array tab = half_or_float(block, f16);
    if (!tab) throw std::invalid_argument("dense table must be float16 or float32");
    struct Ctx {
        DenseI8 *d;
        const void *src;
        bool f16;
        int64_t start;
    } ctx{&d, tab.data(), f16, start};
    py::gil_scoped_release nogil;
    parallel_for(n, 64, 0, [](void *c, int64_t i0, int64_t i1) {
        auto *p = static_cast<Ctx *>(c);
        fill_i8_rows(*p->d, p->src, p->f16, p->start, i0, i1);
    }, &ctx);
    update_maxima(d);
}

void dense_i8_fill_file(DenseI8 &d, const std::string &path, int64_t offset, bool f16, int threads) {
    FileCloser file{open_file(path)};
    if (file.fd < 0 || offset < 0) throw std::invalid_argument("dense table: cannot read " + path);
    struct Ctx {
        DenseI8 *d;
        int fd;
        int64_t offset, row_bytes;
        bool f16;
        std::atomic<bool> short_read{false};
    } ctx{&d, file.fd, offset, d.cols * (f16 ? 2 : 4), f16};
    {
        py::gil_scoped_release nogil;
        parallel_for(d.rows, 64, threads, [](void *c, int64_t r0, int64_t r1) {
            auto *x = static_cast<Ctx *>(c);
            thread_local std::vector<uint8_t> buf;  // kept by each thread, as in raw_rows
            buf.resize(static_cast<size_t>((r1 - r0) * x->row_bytes));
            if (!read_at(x->fd, x->offset + r0 * x->row_bytes, buf.data(), static_cast<int64_t>(buf.size())))
                return x->short_read.store(true);
            fill_i8_rows(*x->d, buf.data(), x->f16, r0, 0, r1 - r0);
        }, &ctx);
    }
    if (ctx.short_read.load()) throw std::invalid_argument("dense table: the file is shorter than its table");
    update_maxima(d);
}

std::shared_ptr<DenseI8> dense_i8_from(py::array table) {
    if (table.ndim() != 2) throw std::invalid_argument("dense table must be 2-D");
    auto d = dense_i8_empty(table.shape(0), table.shape(1));
    dense_i8_fill_rows(*d, 0, table);
    return d;
}

void register_tensors(py::module_ &m) {
    m.def("huge_page_weights", &huge_page_weights,
          "Whether weights are copied into huge-page memory (Linux; BITNET_CPU_HUGE_PAGES=0: no).");
    m.def("promote_weight_arena", [] {
        py::gil_scoped_release nogil;
        return promote_weight_arena();
    }, "Collapse the weights written so far into huge pages (blocks; call it off the critical path).");
    m.def("stop_weight_promotion", &stop_weight_promotion,
          "Make promote_weight_arena return at once, for good (at process exit).");
    m.def("deferred_huge_pages", &deferred_huge_pages,
          "Whether weight segments get their huge pages after loading (promote_weight_arena).");
    m.def("weight_arena_stats", [] {
        const ArenaStats s = weight_arena_stats();
        return py::dict(py::arg("live_bytes") = s.live_bytes, py::arg("segment_bytes") = s.segment_bytes,
                        py::arg("segments") = s.segments);
    }, "Bytes of huge-page weight memory in use, and of the segments that hold them.");
    py::class_<TernaryMatrix, std::shared_ptr<TernaryMatrix>>(m, "TernaryMatrix",
        "A ternary weight packed for the CPU kernels (i2_128, tq1_160, or TQ2_0 bytes).")
        .def_static("from_codes", &TernaryMatrix::from_codes, py::arg("codes"), py::arg("scales"),
                    py::arg("layout") = "i2_128", py::arg("name") = "weight")
        .def_static("from_raw", &TernaryMatrix::from_raw, py::arg("format"), py::arg("raw"), py::arg("rows"),
                    py::arg("cols"), py::arg("layout") = "i2_128", py::arg("name") = "weight",
                    py::arg("factor") = py::none(), py::arg("threads") = 0,
                    "A file's ternary bytes (i2_s, tq2_0, tq1_0) straight into `layout`, rows on the "
                    "thread pool (threads 0: all), scales times `factor` (none, 1 or rows values). "
                    "ValueError where the codec would refuse a row or read it otherwise.")
        .def_static("from_file", &TernaryMatrix::from_file, py::arg("format"), py::arg("path"), py::arg("offset"),
                    py::arg("rows"), py::arg("cols"), py::arg("layout") = "i2_128", py::arg("name") = "weight",
                    py::arg("factor") = py::none(), py::arg("threads") = 0,
                    "from_raw on the tensor's bytes at `offset` of the file at `path`, read with pread "
                    "(no mapping); layout tq2_0 also: TQ2_0 bytes copied as they are (from_tq2_0's "
                    "rules). ValueError also where the file cannot be read.")
        .def_static("from_tq2_0", &TernaryMatrix::from_tq2_0, py::arg("raw"), py::arg("rows"), py::arg("cols"),
                    py::arg("name") = "weight",
                    "llama.cpp TQ2_0 bytes as they are: copied into huge-page memory, or used in place "
                    "(kept alive, not copied) where weights do not go there (huge_page_weights()).")
        .def_property_readonly("in_place", [](const TernaryMatrix &w) { return !w.data; },
                               "True if the matrix reads the bytes it was made from (TQ2_0 in place).")
        .def_property_readonly("address", [](const TernaryMatrix &w) { return reinterpret_cast<uintptr_t>(w.ptr); },
                               "Where its packed bytes start (diagnostics: which mapping holds them).")
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

    m.def("unpack_raw", &unpack_raw, py::arg("format"), py::arg("raw"), py::arg("rows"), py::arg("cols"),
          py::arg("threads") = 0,
          "A file's ternary bytes (i2_s, tq2_0, tq1_0) as (codes int8 [rows, cols], scales float32 "
          "[rows]), as the codec reads them; ValueError where the codec would refuse a row.");

    py::class_<DenseI8, std::shared_ptr<DenseI8>>(m, "DenseI8",
        "A dense table as int8 rows with per-row absmax scales (the int8 output head).")
        .def(py::init(&dense_i8_from), py::arg("table"),
             "From a float16 or float32 table [rows, cols], converted one row at a time.")
        .def_static("empty", &dense_i8_empty, py::arg("rows"), py::arg("cols"),
                    "An all-zero table to fill with fill_rows.")
        .def("fill_rows", &dense_i8_fill_rows, py::arg("start"), py::arg("block"),
             "Rows start .. start + len(block) from a float16 or float32 block.")
        .def("fill_file", &dense_i8_fill_file, py::arg("path"), py::arg("offset"), py::arg("f16"),
             py::arg("threads") = 0,
             "Every row from the float16 (f16) or float32 table at `offset` of the file at `path`, "
             "read with pread on the thread pool; ValueError where the file cannot be read.")
        .def_readonly("rows", &DenseI8::rows)
        .def_readonly("cols", &DenseI8::cols)
        .def_property_readonly("shape", [](const DenseI8 &d) { return py::make_tuple(d.rows, d.cols); })
        .def_property_readonly("nbytes", &DenseI8::nbytes);
}

}  // namespace bitnet
