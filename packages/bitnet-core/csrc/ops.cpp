// Python bindings of the CPU ops: the `Kernels` class (one instruction set,
// a thread count), one method per op of the provider protocol. Shapes are
// checked here; the work runs in `Compute` (compute.cpp) with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute.h"
#include "native.h"
#include "tensors.h"
#include "threadpool.h"

namespace py = pybind11;

namespace bitnet {

const KernelTable *kernel_table(const std::string &isa) {
    const KernelTable *k = nullptr;
    if (isa == "scalar") k = kernels_scalar();
    else if (isa == "avx2") k = kernels_avx2();
    else if (isa == "avx512") k = kernels_avx512();
    else if (isa == "neon") k = kernels_neon();
    else throw std::invalid_argument("unknown instruction set '" + isa + "'");
    if (!k) throw std::invalid_argument("kernels for '" + isa + "' are not compiled into this build");
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
    return k;
}

namespace {

template <typename A>
std::pair<int64_t, int64_t> shape2(const A &x, const char *op) {
    if (x.ndim() != 2) throw std::invalid_argument(std::string(op) + " expects [T, K] activations");
    return {x.shape(0), x.shape(1)};
}

void check_k(int64_t K, const TernaryMatrix &w) {
    if (K != w.cols)
        throw std::invalid_argument("activations of " + std::to_string(K) + " features do not match weight '" +
                                    w.name + "' [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
}

class Kernels {
  public:
    Kernels(const std::string &isa, int threads) : c_(kernel_table(isa), threads) {}

    std::string isa() const { return c_.table()->name; }
    int threads() const { return c_.threads(); }

    py::tuple quantize_act(CArray<float> x) {
        auto [T, K] = shape2(x, "quantize_act");
        py::array_t<int8_t> xq({T, K});
        py::array_t<float> xs(T);
        std::vector<int32_t> sum(T);
        {
            py::gil_scoped_release nogil;
            c_.quantize(x.data(), T, K, K, xq.mutable_data(), xs.mutable_data(), sum.data());
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
            int8_t *xqd = reinterpret_cast<int8_t *>(xq.get());
            c_.quantize(x.data(), T, K, w.kp, xqd, xs.data(), sum.data());
            TernaryOut out{&w, y.mutable_data()};
            c_.ternary(&out, 1, xqd, w.kp, xs.data(), sum.data(), T);
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
            TernaryOut out{&w, y.mutable_data()};
            c_.ternary(&out, 1, xpd, w.kp, xs.data(), sum.data(), T);
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
            parallel_for(w.rows, 16, c_.threads(), [](void *c, int64_t r0, int64_t r1) {
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
        bool f16 = false;
        py::array tab = half_or_float(table, f16);
        if (!tab) throw std::invalid_argument("matmul_dense: table must be float16 or float32");
        const int64_t N = table.shape(0);
        py::array_t<float> y({T, N});
        {
            py::gil_scoped_release nogil;
            c_.dense(tab.data(), f16, N, K, x.data(), T, y.mutable_data());
        }
        return y;
    }

    // check: the float table d was made from, or None (see Compute::dense_i8_checked)
    py::array_t<float> matmul_dense_i8(CArray<float> x, const DenseI8 &d, py::object check) {
        auto [T, K] = shape2(x, "matmul_dense_i8");
        if (K != d.cols) throw std::invalid_argument("matmul_dense_i8: activations do not match the table");
        bool f16 = false;
        const bool checked = !check.is_none();
        py::array tab;  // (a default py::array is an empty array, not a null handle)
        if (checked) {
            auto table = check.cast<py::array>();
            if (table.ndim() != 2 || table.shape(0) != d.rows || table.shape(1) != d.cols)
                throw std::invalid_argument("matmul_dense_i8: the check table does not match the int8 table");
            tab = half_or_float(table, f16);
            if (!tab) throw std::invalid_argument("matmul_dense_i8: check table must be float16 or float32");
        }
        py::array_t<float> y({T, d.rows});
        {
            py::gil_scoped_release nogil;
            Buffer xq = aligned_buffer(static_cast<size_t>(T * d.stride));
            std::vector<float> xs(T);
            std::vector<int32_t> sum(T);
            int8_t *q = reinterpret_cast<int8_t *>(xq.get());
            if (checked) c_.dense_i8_checked(d, tab.data(), f16, x.data(), T, y.mutable_data(), q, xs.data(), sum.data());
            else c_.dense_i8(d, x.data(), T, y.mutable_data(), q, xs.data(), sum.data());
        }
        return y;
    }

    // the caches: float32 or float16 (both the same), used in place when contiguous
    // window > 0: query t sees the last `window` positions only (a sliding-window layer)
    py::array_t<float> attention(CArray<float> q, py::array k_cache, py::array v_cache, int64_t start,
                                 int64_t window) {
        if (window < 0) throw std::invalid_argument("attention: the window must be >= 0");
        bool f16 = false, v16 = false;
        py::array kc = half_or_float(k_cache, f16), vc = half_or_float(v_cache, v16);
        if (f16 != v16) throw std::invalid_argument("attention: the K and V caches must have the same dtype");
        if (!kc || !vc) throw std::invalid_argument("attention: caches must be float32 or float16");
        if (q.ndim() != 3 || kc.ndim() != 3 || vc.ndim() != 3)
            throw std::invalid_argument("attention: q and the caches must be [T, H, D]");
        const int64_t T = q.shape(0), Hq = q.shape(1), D = q.shape(2), Hkv = kc.shape(1);
        if (Hkv == 0 || Hq % Hkv || kc.shape(2) != D || start < 0 || start + T > kc.shape(0) ||
            vc.shape(0) != kc.shape(0) || vc.shape(1) != Hkv || vc.shape(2) != D)
            throw std::invalid_argument("attention: q does not match the caches at this start");
        py::array_t<float> out({T, Hq, D});
        AttentionArgs a{q.data(), kc.data(), vc.data(), out.mutable_data(), T, Hq, Hkv, D, start,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), f16, window};
        {
            py::gil_scoped_release nogil;
            c_.attention(a);
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
        c_.rmsnorm(xd, wd, T, K, eps, yd);
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
        c_.rope(yd, T, H, D, RopeTable(pos, T, theta, rot_dim), neox);
        return y;
    }

    // the sum of a buffer's bytes, read by every thread (tools/bench times it)
    uint64_t sum_bytes(py::buffer b) {
        py::buffer_info info = b.request();
        if (info.ndim != 1 || info.strides[0] != info.itemsize)
            throw std::invalid_argument("sum_bytes needs a contiguous 1-D buffer");
        const auto *p = static_cast<const uint8_t *>(info.ptr);
        const int64_t n = info.size * info.itemsize;
        py::gil_scoped_release nogil;
        return c_.sum_bytes(p, n);
    }

    py::array_t<uint16_t> to_f16(CArray<float> x) {
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        const float *xd = x.data();
        uint16_t *od = out.mutable_data();
        py::gil_scoped_release nogil;
        c_.to_f16(xd, od, x.size());
        return out;
    }

    py::array_t<float> silu_mul(CArray<float> g, CArray<float> u) { return gated(Compute::Activation::kSilu, g, u); }
    py::array_t<float> relu2_mul(CArray<float> g, CArray<float> u) {
        return gated(Compute::Activation::kRelu2, g, u);
    }
    py::array_t<float> gelu_mul(CArray<float> g, CArray<float> u) { return gated(Compute::Activation::kGelu, g, u); }

  private:
    py::array_t<float> gated(Compute::Activation act, CArray<float> g, CArray<float> u) {
        if (g.ndim() != u.ndim() || g.size() != u.size())
            throw std::invalid_argument("gate and up must have the same shape");
        for (py::ssize_t i = 0; i < g.ndim(); ++i)
            if (g.shape(i) != u.shape(i)) throw std::invalid_argument("gate and up must have the same shape");
        py::array_t<float> y(std::vector<py::ssize_t>(g.shape(), g.shape() + g.ndim()));
        const float *gd = g.data(), *ud = u.data();
        float *yd = y.mutable_data();
        const int64_t K = g.ndim() ? g.shape(g.ndim() - 1) : 1, rows = K ? g.size() / K : 0;
        py::gil_scoped_release nogil;
        c_.gated(act, gd, ud, yd, rows, K);
        return y;
    }

    Compute c_;
};

}  // namespace

void register_ops(py::module_ &m) {
    m.def("default_threads", &default_threads, "CPUs this process may run on (sched_getaffinity).");
    m.def("set_thread_affinity", [](std::vector<int> cpus) {
        for (int c : cpus)
            if (c < 0) throw std::invalid_argument("a CPU number must be >= 0");
        return set_thread_affinity(cpus);
    }, py::arg("cpus"),
          "Pin the kernels' threads: the calling thread to cpus[0], worker i to cpus[(i + 1) % len]; "
          "[] stops pinning. False where threads cannot be pinned (not Linux).");
    m.def("thread_affinity", &thread_affinity, "The CPU list of set_thread_affinity ([]: not pinned).");
    m.def("compiled_isas", [] {
        std::vector<std::string> v{"scalar"};
        if (kernels_avx2()) v.push_back("avx2");
        if (kernels_avx512()) v.push_back("avx512");
        if (kernels_neon()) v.push_back("neon");
        return v;
    }, "Instruction sets whose kernels are compiled into this build.");

    py::class_<Kernels>(m, "Kernels", "The CPU kernels of one instruction set, on `threads` threads.")
        .def(py::init<const std::string &, int>(), py::arg("isa"), py::arg("threads") = 0)
        .def_property_readonly("isa", &Kernels::isa)
        .def_property_readonly("threads", &Kernels::threads)
        .def("quantize_act", &Kernels::quantize_act, py::arg("x"))
        .def("linear", &Kernels::linear, py::arg("x"), py::arg("weight"))
        .def("matmul_i2s", &Kernels::matmul_i2s, py::arg("xq"), py::arg("xscale"), py::arg("weight"))
        .def("matmul_ternary_float", &Kernels::matmul_ternary_float, py::arg("x"), py::arg("weight"))
        .def("matmul_dense", &Kernels::matmul_dense, py::arg("x"), py::arg("table"))
        .def("matmul_dense_i8", &Kernels::matmul_dense_i8, py::arg("x"), py::arg("table"),
             py::arg("check") = py::none(),
             "The int8 head; with check (its float table) every row that could hold a token's "
             "largest logit is recomputed exactly on it.")
        .def("attention", &Kernels::attention, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("start"),
             py::arg("window") = 0, "Causal grouped-query attention; window > 0: over the last `window` positions.")
        .def("rmsnorm", &Kernels::rmsnorm, py::arg("x"), py::arg("weight"), py::arg("eps"))
        .def("rope", &Kernels::rope, py::arg("x"), py::arg("positions"), py::arg("theta"), py::arg("style"),
             py::arg("rot_dim"))
        .def("sum_bytes", &Kernels::sum_bytes, py::arg("buffer"),
             "Sum of the bytes of a contiguous 1-D buffer, read by every thread (memory bandwidth probe).")
        .def("to_f16", &Kernels::to_f16, py::arg("x"), "float16 bits (uint16) of x, round to nearest even.")
        .def("silu_mul", &Kernels::silu_mul, py::arg("gate"), py::arg("up"))
        .def("relu2_mul", &Kernels::relu2_mul, py::arg("gate"), py::arg("up"))
        .def("gelu_mul", &Kernels::gelu_mul, py::arg("gate"), py::arg("up"), "gelu_tanh(gate) * up (float64 inside).");
}

}  // namespace bitnet
