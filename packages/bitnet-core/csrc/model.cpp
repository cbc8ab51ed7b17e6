// The fused CPU forward pass: a whole BitNet b1.58 model, all layers, in one
// call with the GIL released (`CpuModel`, used by the native CPU providers'
// backend, bitnet_core/providers/cpu_backend.py).
//
// It runs the graphs of the generic engine (bitnet_core/sdk/runner.py: bitnet,
// llama, and the qwen3/gemma3 embedding graphs with their BitLinear input norms,
// QK head norms, post-norms, GELU and sliding-window layers) with the same
// `Compute` ops in the same order, so its logits (and an embedding model's
// hidden states, hidden_batch) equal the op-by-op path bit for bit; what it
// saves is the Python between ops (a decode step is ~15 ops a layer), the
// allocation of every intermediate array, and, without input norms, one
// activation quantization and thread hand-off for each of q/k/v and gate/up,
// which then share their input.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "compute.h"
#include "native.h"
#include "tensors.h"

namespace py = pybind11;

namespace bitnet {
namespace {

using F32Array = py::array_t<float, py::array::c_style>;

constexpr int64_t kSubBatch = 64;  // tokens per pass through the layers

// A float16 or float32 table [rows, cols], kept alive.
struct Table {
    py::array keep;
    const void *ptr = nullptr;
    bool f16 = false;
    int64_t rows = 0, cols = 0;

    static Table from(py::array a, const char *what) {
        Table t;
        if (a.ndim() != 2) throw std::invalid_argument(std::string(what) + " must be 2-D");
        if (!is_half(a.dtype()) && !is_float(a.dtype()))
            throw std::invalid_argument(std::string(what) + " must be float16 or float32");
        t.keep = half_or_float(a, t.f16);
        t.ptr = t.keep.data();
        t.rows = a.shape(0);
        t.cols = a.shape(1);
        return t;
    }

    // where the table's bytes are in a file, when its rows are read with pread (see
    // CpuModel::read_embedding_from); fd < 0: through the pointer
    int fd = -1;
    int64_t file_offset = 0;

    size_t row_bytes() const { return (f16 ? 2 : 4) * static_cast<size_t>(cols); }

    // row r's bytes: read into buf (row_bytes()) with pread where fd is set, else the mapping's
    const void *raw_row(int64_t r, void *buf) const {
        const size_t bytes = row_bytes();
        const void *src = static_cast<const char *>(ptr) + r * bytes;
#if defined(__unix__) || defined(__APPLE__)
        if (fd >= 0) {
            const off_t at = static_cast<off_t>(file_offset + r * static_cast<int64_t>(bytes));
            if (pread(fd, buf, bytes, at) == static_cast<ssize_t>(bytes)) src = buf;
            // else (a short read, an error): the mapping still holds the same bytes
        }
#else
        (void)buf;
#endif
        return src;
    }

    // row r as float32 (float16 -> float32 is exact, as numpy's astype)
    void row(int64_t r, float *out) const {
        const size_t bytes = row_bytes();
        std::vector<char> buf(fd >= 0 ? bytes : 0);
        const void *src = raw_row(r, buf.data());
        if (f16) {
            const uint16_t *h = static_cast<const uint16_t *>(src);
            for (int64_t c = 0; c < cols; ++c) out[c] = half_bits_to_float(h[c]);
        } else {
            std::memcpy(out, src, bytes);
        }
    }
};

// What a forward pass spends its time on, for `CpuModel.op_times` (the parts of
// a layer in order, then the head and the rest)
enum Op { kNorms, kQKV, kRopeStore, kAttention, kO, kGateUp, kGated, kDown, kHead, kOther, kOps };
constexpr const char *kOpNames[kOps] = {"norms_quant", "ternary_qkv", "rope_kv_store", "attention",
                                        "ternary_o", "ternary_gate_up", "gated", "ternary_down",
                                        "head", "other"};

// Wall time between marks, added to one op's total each mark (when enabled).
class OpClock {
  public:
    OpClock(std::array<double, kOps> *totals) : totals_(totals) {}
    void mark(Op op) {
        if (!totals_) return;
        const auto now = std::chrono::steady_clock::now();
        (*totals_)[op] += std::chrono::duration<double>(now - last_).count();
        last_ = now;
    }

  private:
    std::array<double, kOps> *totals_;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// the BitLinears of a layer, in the order of their input norms (Layer::in_norm)
enum Proj { kProjQ, kProjK, kProjV, kProjO, kProjGate, kProjUp, kProjDown, kProjs };

struct Layer {
    // attn_sub_norm / ffn_sub_norm are null in the llama, qwen3 and gemma3 graphs (skipped)
    const float *attn_norm, *attn_sub_norm, *ffn_norm, *ffn_sub_norm;
    const TernaryMatrix *q, *k, *v, *o, *gate, *up, *down;
    // null where the graph has none: the QK head norms [head_dim] (qwen3, gemma3; the
    // q norm carries the query scale), gemma3's norms of the attention and FFN outputs
    // [hidden], each BitLinear's own input norm (use_rms_norm; all or none)
    const float *q_norm = nullptr, *k_norm = nullptr, *post_attn_norm = nullptr, *post_ffn_norm = nullptr;
    std::array<const float *, kProjs> in_norm{};
    size_t rope = 0;     // the layer's rope base: CpuModel::thetas_[rope]
    int64_t window = 0;  // > 0: a sliding-window (local) layer
};

class CpuModel {
  public:
    CpuModel(const std::string &isa, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
             int64_t rot_dim, double rope_theta, const std::string &rope_style, double eps,
             const std::string &ffn_activation, py::array embedding, py::object head, py::array output_norm,
             py::list layers, py::object head_check, double linear_eps)
        : keep_{embedding, head, output_norm, layers, head_check}, k_(kernel_table(isa)), H_(hidden), Hq_(heads), Hkv_(kv_heads), D_(head_dim), rot_dim_(rot_dim),
          eps_(eps), linear_eps_(linear_eps < 0 ? eps : linear_eps) {
        if (rope_style != "neox" && rope_style != "norm")
            throw std::invalid_argument("unknown rope style '" + rope_style + "'");
        if (ffn_activation == "silu") act_ = Compute::Activation::kSilu;
        else if (ffn_activation == "relu2") act_ = Compute::Activation::kRelu2;
        else if (ffn_activation == "gelu") act_ = Compute::Activation::kGelu;
        else throw std::invalid_argument("unknown ffn activation '" + ffn_activation + "'");
        neox_ = rope_style == "neox";
        if (H_ <= 0 || Hq_ <= 0 || Hkv_ <= 0 || D_ <= 0 || Hq_ % Hkv_)
            throw std::invalid_argument("model: bad head configuration");
        if (rot_dim_ < 0 || rot_dim_ > D_ || rot_dim_ % 2)
            throw std::invalid_argument("model: rot_dim must be even and <= head dim");
        embedding_ = Table::from(embedding, "embedding");
        if (embedding_.cols != H_) throw std::invalid_argument("embedding: wrong width");
        if (head.is_none()) {  // an embedding model: hidden states only (hidden_batch)
            if (!head_check.is_none()) throw std::invalid_argument("head_check needs an int8 head");
        } else if (py::isinstance<DenseI8>(head)) {
            head_i8_ = head.cast<std::shared_ptr<DenseI8>>();
            vocab_ = head_i8_->rows;
            if (head_i8_->cols != H_) throw std::invalid_argument("head: wrong width");
            if (!head_check.is_none()) {  // the float table the int8 head was made from
                head_ = Table::from(head_check.cast<py::array>(), "head_check");
                if (head_.rows != vocab_ || head_.cols != H_)
                    throw std::invalid_argument("head_check: not the int8 head's shape");
            }
        } else {
            if (!head_check.is_none()) throw std::invalid_argument("head_check needs an int8 head");
            head_ = Table::from(head.cast<py::array>(), "head");
            vocab_ = head_.rows;
            if (head_.cols != H_) throw std::invalid_argument("head: wrong width");
        }
        output_norm_ = vector_of(output_norm, H_, "output_norm");
        const int64_t Q = Hq_ * D_, KV = Hkv_ * D_;
        for (py::handle item : layers) {
            auto parts = item.cast<py::tuple>();
            if (parts.size() != 11 && parts.size() != 18)
                throw std::invalid_argument("a layer is 4 norms and 7 matrices (then 4 norms, the input norms, "
                                            "rope base and window)");
            Layer l{};
            l.attn_norm = vector_of(parts[0], H_, "attn_norm");
            l.attn_sub_norm = parts[1].is_none() ? nullptr : vector_of(parts[1], Q, "attn_sub_norm");
            l.ffn_norm = vector_of(parts[2], H_, "ffn_norm");
            l.q = matrix(parts[4], Q, H_);
            l.k = matrix(parts[5], KV, H_);
            l.v = matrix(parts[6], KV, H_);
            l.o = matrix(parts[7], H_, Q);
            l.gate = matrix(parts[8], -1, H_);
            F_ = l.gate->rows;
            l.up = matrix(parts[9], F_, H_);
            l.down = matrix(parts[10], H_, F_);
            l.ffn_sub_norm = parts[3].is_none() ? nullptr : vector_of(parts[3], F_, "ffn_sub_norm");
            double theta = rope_theta;
            if (parts.size() == 18) {
                if (parts[11].is_none() != parts[12].is_none())
                    throw std::invalid_argument("q_norm and k_norm: both or neither");
                l.q_norm = parts[11].is_none() ? nullptr : vector_of(parts[11], D_, "q_norm");
                l.k_norm = parts[12].is_none() ? nullptr : vector_of(parts[12], D_, "k_norm");
                l.post_attn_norm = parts[13].is_none() ? nullptr : vector_of(parts[13], H_, "post_attn_norm");
                l.post_ffn_norm = parts[14].is_none() ? nullptr : vector_of(parts[14], H_, "post_ffn_norm");
                if (!parts[15].is_none()) {
                    auto norms = parts[15].cast<py::tuple>();
                    if (norms.size() != kProjs) throw std::invalid_argument("in_norms: one per BitLinear (7)");
                    const int64_t widths[kProjs] = {H_, H_, H_, Q, H_, H_, F_};
                    for (int j = 0; j < kProjs; ++j) l.in_norm[j] = vector_of(norms[j], widths[j], "in_norm");
                }
                theta = parts[16].cast<double>();
                l.window = parts[17].cast<int64_t>();
                if (l.window < 0) throw std::invalid_argument("window must be >= 0");
            }
            auto at = std::find(thetas_.begin(), thetas_.end(), theta);
            l.rope = static_cast<size_t>(at - thetas_.begin());
            if (at == thetas_.end()) thetas_.push_back(theta);
            layers_.push_back(l);
            for (const TernaryMatrix *w : {l.q, l.k, l.v, l.gate, l.up}) kp_h_ = std::max(kp_h_, w->kp);
            kp_q_ = std::max(kp_q_, l.o->kp);
            kp_f_ = std::max(kp_f_, l.down->kp);
        }
        kp_head_ = head_i8_ ? head_i8_->stride : 0;
        if (thetas_.empty()) thetas_.push_back(rope_theta);
    }

    // Read embedding rows from file descriptor `fd` (the table's bytes at `offset`)
    // instead of through the mapping: when nothing else reads the table (an int8
    // or untied head), a row read through the mapping maps its whole page-cache
    // folio (up to 2 MB on ext4), so a prompt of random ids made much of the
    // table resident. The caller keeps the file open. False where there is no pread.
    // The checked int8 head's float table, when it is the embedding (tied), reads
    // the rows it recomputes the same way.
    bool read_embedding_from(int fd, int64_t offset) {
        const bool tied = head_i8_ && head_.ptr == embedding_.ptr;
        return read_rows_from(embedding_, fd, offset) && (!tied || read_rows_from(head_, fd, offset));
    }

    // The same for the checked int8 head's own float table (an untied head).
    bool read_head_from(int fd, int64_t offset) {
        if (!head_i8_ || !head_.ptr) throw std::invalid_argument("read_head_from: no checked int8 head");
        return read_rows_from(head_, fd, offset);
    }

    int64_t vocab() const { return vocab_; }
    bool has_head() const { return vocab_ > 0; }
    // Per-op wall time of the passes run while enabled (set_op_timing), in seconds by
    // op name, with "passes": where a forward pass spends its time (bitnet bench --profile)
    void set_op_timing(bool enabled) {
        std::lock_guard<std::mutex> lock(mu_);
        timing_ = enabled;
        op_seconds_.fill(0.0);
        op_passes_ = 0;
    }
    py::dict op_times() {
        std::lock_guard<std::mutex> lock(mu_);
        py::dict out;
        for (int i = 0; i < kOps; ++i) out[kOpNames[i]] = op_seconds_[i];
        out["passes"] = op_passes_;
        return out;
    }
    // tokens through the checked int8 head so far, and the logits it recomputed exactly
    std::pair<int64_t, int64_t> head_checks() {
        std::lock_guard<std::mutex> lock(mu_);
        return {head_checked_tokens_, head_checked_rows_};
    }
    int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }

    // Append ids [T] to the caches (k_caches[i], v_caches[i]: float32 or float16 [S, Hkv, D],
    // written at rows start .. start + T) and return the logits [T, vocab]
    // (all_logits) or [1, vocab] of the last token.
    py::array_t<float> forward(CArray<int64_t> ids, py::list k_caches, py::list v_caches, int64_t start,
                               bool all_logits, int threads) {
        const int64_t T = ids.size();
        if (T < 1) throw std::invalid_argument("forward needs at least one token id");
        if (!has_head()) throw std::invalid_argument("no output head (an embedding model): use hidden_batch");
        check_ids(ids.data(), T);
        int f16 = -1;
        Segment whole = segment(k_caches, v_caches, start, T, f16);
        const int64_t rows_out = all_logits ? T : 1;
        py::array_t<float> logits({rows_out, vocab_});
        float *out = logits.mutable_data();
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(mu_);
            const Compute c(k_, threads);
            // sub-batches bound the scratch memory (a few MB) whatever T is; the
            // weights are read once per sub-batch, which prefill's compute hides.
            // Even sizes: a sub-batch of one token would take decode's attention
            // path and round differently from the same prompt in one batch.
            const int64_t parts = (T + kSubBatch - 1) / kSubBatch;
            for (int64_t p = 0, t0 = 0; p < parts; ++p) {
                const int64_t n = T / parts + (p < T % parts ? 1 : 0);
                const bool last = t0 + n == T;
                Segment part = whole;
                part.t0 = 0;
                part.n = n;
                part.start = start + t0;
                const Head head = all_logits ? Head::kAll : (last ? Head::kLast : Head::kNone);
                run(c, ids.data() + t0, n, {part}, f16 == 1, head,
                    all_logits ? out + t0 * vocab_ : (last ? out : nullptr));
                t0 += n;
            }
        }
        return logits;
    }

    // One step for several sequences: sequence j appends the counts[j] ids that
    // follow the previous sequences' in `ids` to its caches (k_caches[j][i],
    // v_caches[j][i] for layer i) at rows starts[j] ..; returns the logits
    // [len(counts), vocab] of each sequence's last token. Every token goes
    // through the ternary matmuls (and the head) in one batch, so the weights
    // are read once per step; attention runs per sequence over its own cache.
    // Each row equals what forward() gives for the same sequence and ids.
    py::array_t<float> forward_batch(CArray<int64_t> ids, std::vector<int64_t> counts,
                                     std::vector<int64_t> starts, py::list k_caches, py::list v_caches,
                                     int threads) {
        if (!has_head()) throw std::invalid_argument("no output head (an embedding model): use hidden_batch");
        const int64_t T = ids.size(), n_seq = static_cast<int64_t>(counts.size());
        int f16 = -1;
        std::vector<Segment> segs = segments(ids, counts, starts, k_caches, v_caches, f16);
        py::array_t<float> logits({n_seq, vocab_});
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(mu_);
            run(Compute(k_, threads), ids.data(), T, segs, f16 == 1, Head::kLastOfEach, logits.mutable_data());
        }
        return logits;
    }

    // The final hidden states (output-normed) [T, hidden] of every token of the
    // sequences (ids, counts, starts and caches as forward_batch): an embedding
    // model's forward, pooled by the caller. Each sequence goes in equal parts of at
    // most kSubBatch tokens (as forward splits a prompt) and consecutive parts share a
    // pass up to kSubBatch tokens, so a sequence's states do not depend on the others.
    py::array_t<float> hidden_batch(CArray<int64_t> ids, std::vector<int64_t> counts, std::vector<int64_t> starts,
                                    py::list k_caches, py::list v_caches, int threads) {
        int f16 = -1;
        const std::vector<Segment> segs = segments(ids, counts, starts, k_caches, v_caches, f16);
        const int64_t T = ids.size();
        py::array_t<float> out({T, H_});
        float *o = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(mu_);
            const Compute c(k_, threads);
            std::vector<Segment> pass;
            int64_t p0 = 0, pn = 0;  // the pass's rows of ids
            auto flush = [&] {
                if (pass.empty()) return;
                run(c, ids.data() + p0, pn, pass, f16 == 1, Head::kHidden, o + p0 * H_);
                p0 += pn;
                pn = 0;
                pass.clear();
            };
            for (const Segment &s : segs) {
                const int64_t parts = (s.n + kSubBatch - 1) / kSubBatch;
                for (int64_t p = 0, at = 0; p < parts; ++p) {
                    const int64_t n = s.n / parts + (p < s.n % parts ? 1 : 0);
                    if (pn + n > kSubBatch) flush();
                    Segment part = s;
                    part.t0 = pn;
                    part.n = n;
                    part.start = s.start + at;
                    pass.push_back(std::move(part));
                    pn += n;
                    at += n;
                }
            }
            flush();
        }
        return out;
    }

  private:
    bool read_rows_from(Table &t, int fd, int64_t offset) {
#if defined(__unix__) || defined(__APPLE__)
        std::lock_guard<std::mutex> lock(mu_);
        t.fd = fd;
        t.file_offset = offset;
        return true;
#else
        (void)t;
        (void)fd;
        (void)offset;
        return false;
#endif
    }

    // one sequence's tokens in a forward pass: rows t0 .. t0 + n of the batch, at
    // positions start .. start + n of its caches (one K and one V per layer)
    struct Segment {
        int64_t t0 = 0, n = 0, start = 0;
        std::vector<void *> kc, vc;
    };

    // which logits a pass computes: none, the last token's, every token's, or
    // the last token of each segment; or (kHidden) no logits but every token's
    // output-normed hidden state
    enum class Head { kNone, kLast, kAll, kLastOfEach, kHidden };

    void check_ids(const int64_t *idp, int64_t T) const {
        for (int64_t t = 0; t < T; ++t)
            if (idp[t] < 0 || idp[t] >= embedding_.rows)
                throw std::invalid_argument("token id " + std::to_string(idp[t]) + " out of range [0, " +
                                            std::to_string(embedding_.rows) + ")");
    }

    Segment segment(py::handle k_caches, py::handle v_caches, int64_t start, int64_t n, int &f16) {
        const int64_t L = num_layers();
        auto ks = py::reinterpret_borrow<py::sequence>(k_caches), vs = py::reinterpret_borrow<py::sequence>(v_caches);
        if (static_cast<int64_t>(ks.size()) != L || static_cast<int64_t>(vs.size()) != L)
            throw std::invalid_argument("forward: need one K and one V cache per layer");
        Segment seg;
        seg.n = n;
        seg.start = start;
        seg.kc.resize(L);
        seg.vc.resize(L);
        int64_t S = -1;
        for (int64_t i = 0; i < L; ++i) {
            seg.kc[i] = cache_ptr(ks[i], start, n, S, f16);
            seg.vc[i] = cache_ptr(vs[i], start, n, S, f16);
        }
        return seg;
    }

    // forward_batch's and hidden_batch's sequences, checked; f16 as cache_ptr
    std::vector<Segment> segments(const CArray<int64_t> &ids, const std::vector<int64_t> &counts,
                                  const std::vector<int64_t> &starts, py::list k_caches, py::list v_caches,
                                  int &f16) {
        const int64_t T = ids.size(), n_seq = static_cast<int64_t>(counts.size());
        if (n_seq < 1) throw std::invalid_argument("forward_batch needs at least one sequence");
        if (static_cast<int64_t>(starts.size()) != n_seq || static_cast<int64_t>(k_caches.size()) != n_seq ||
            static_cast<int64_t>(v_caches.size()) != n_seq)
            throw std::invalid_argument("forward_batch: one count, start, K and V cache list per sequence");
        check_ids(ids.data(), T);
        std::vector<Segment> segs;
        int64_t t0 = 0;
        for (int64_t j = 0; j < n_seq; ++j) {
            if (counts[j] < 1) throw std::invalid_argument("forward_batch: every sequence needs a token");
            segs.push_back(segment(k_caches[j], v_caches[j], starts[j], counts[j], f16));
            segs.back().t0 = t0;
            t0 += counts[j];
        }
        if (t0 != T) throw std::invalid_argument("forward_batch: the counts do not add up to the ids");
        return segs;
    }

    static const float *vector_of(py::handle h, int64_t n, const char *what) {
        auto a = py::reinterpret_borrow<py::object>(h);
        if (!F32Array::check_(a)) throw std::invalid_argument(std::string(what) + " must be contiguous float32");
        auto arr = a.cast<F32Array>();
        if (arr.size() != n)
            throw std::invalid_argument(std::string(what) + " has " + std::to_string(arr.size()) +
                                        " elements, need " + std::to_string(n));
        return arr.data();
    }

    const TernaryMatrix *matrix(py::handle h, int64_t rows, int64_t cols) {
        auto m = h.cast<std::shared_ptr<TernaryMatrix>>();
        if ((rows >= 0 && m->rows != rows) || m->cols != cols)
            throw std::invalid_argument("weight '" + m->name + "' has the wrong shape");
        matrices_.push_back(m);
        return m.get();
    }

    // a K or V cache: a writable, contiguous float32 or float16 [S, kv_heads, head_dim]
    // array; every cache of a call has the same S and dtype (f16: -1 unknown yet, 0, 1)
    void *cache_ptr(py::handle h, int64_t start, int64_t T, int64_t &S, int &f16) {
        if (!py::isinstance<py::array>(h)) throw std::invalid_argument("a KV cache must be a numpy array");
        auto arr = py::reinterpret_borrow<py::array>(h);
        const bool half = is_half(arr.dtype());
        if (!(half || is_float(arr.dtype())) || !(arr.flags() & py::array::c_style))
            throw std::invalid_argument("a KV cache must be a contiguous float32 or float16 array");
        if (f16 >= 0 && half != (f16 == 1)) throw std::invalid_argument("the KV caches mix float16 and float32");
        f16 = half ? 1 : 0;
        if (arr.ndim() != 3 || arr.shape(1) != Hkv_ || arr.shape(2) != D_ || (S >= 0 && arr.shape(0) != S))
            throw std::invalid_argument("a KV cache does not match the model's [S, kv_heads, head_dim]");
        S = arr.shape(0);
        if (start < 0 || start + T > S) throw std::invalid_argument("forward: the KV cache is too short");
        return arr.mutable_data();  // raises if read-only
    }

    // 64-byte aligned: from a std::vector (16 mod 64 for large blocks) half the
    // 32-byte loads of the int8 activations split a cache line, and the 8-token
    // prefill GEMM ran at 73 GMAC/s per thread instead of 93 (see CPU_KERNELS.md)
    float *scratch(size_t floats) {
        if (scratch_floats_ < floats) {
            scratch_ = aligned_buffer(floats * sizeof(float));
            scratch_floats_ = floats;
        }
        return reinterpret_cast<float *>(scratch_.get());
    }

    // T tokens of the segments (their rows of ids, in order); then the logits `head` asks for
    // (kHidden: the output-normed hidden states [T, hidden] into `logits`)
    void run(const Compute &c, const int64_t *ids, int64_t T, const std::vector<Segment> &segs, bool kv_f16,
             Head head, float *logits) {
        const int64_t H = H_, Q = Hq_ * D_, KV = Hkv_ * D_, F = F_;
        const int64_t kpx = std::max({kp_h_, kp_q_, kp_f_, kp_head_});
        // float scratch: x, h, q, k, v, a, o, gate, up; then int8 codes, scales, sums
        const size_t nf = static_cast<size_t>(T * (3 * H + 2 * Q + 2 * KV + 2 * F + kpx / 4 + 2) + 64);
        float *x = scratch(nf), *h = x + T * H, *q = h + T * H, *kb = q + T * Q, *vb = kb + T * KV;
        float *a = vb + T * KV, *o = a + T * Q, *g = o + T * H, *u = g + T * F;
        float *xs = u + T * F;
        int32_t *sum = reinterpret_cast<int32_t *>(xs + T);
        int8_t *xq = reinterpret_cast<int8_t *>((reinterpret_cast<uintptr_t>(sum + T) + 63) & ~uintptr_t{63});
        std::vector<int64_t> pos(T);
        for (const Segment &s : segs)
            for (int64_t j = 0; j < s.n; ++j) pos[s.t0 + j] = s.start + j;
        std::vector<RopeTable> ropes;  // the angles of every layer of each rope base
        for (double theta : thetas_) ropes.emplace_back(pos.data(), T, theta, rot_dim_);
        std::vector<AttentionArgs> decode;  // a layer's one-token attentions
        OpClock clock(timing_ ? &op_seconds_ : nullptr);
        op_passes_ += timing_;
        for (int64_t t = 0; t < T; ++t) embedding_.row(ids[t], x + t * H);
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D_)));
        clock.mark(kOther);
        // y = W in (one BitLinear, K inputs wide): after its own input norm when the layer
        // has them (into `normed`, T x K floats; may be `in`), each its own quantization
        auto project = [&](const float *in, int64_t K, const float *in_norm, float *normed,
                           const TernaryMatrix *w, float *y, Op op) {
            if (in_norm) {
                c.rmsnorm(in, in_norm, T, K, linear_eps_, normed);
                in = normed;
            }
            c.quantize(in, T, K, kpx, xq, xs, sum);
            clock.mark(kNorms);
            const TernaryOut out{w, y};
            c.ternary(&out, 1, xq, kpx, xs, sum, T);
            clock.mark(op);
        };

        for (size_t i = 0; i < layers_.size(); ++i) {
            const Layer &l = layers_[i];
            const bool own_norms = l.in_norm[kProjQ] != nullptr;
            // attention
            c.rmsnorm(x, l.attn_norm, T, H, eps_, h);
            if (own_norms) {  // (o is free until the o-projection)
                project(h, H, l.in_norm[kProjQ], o, l.q, q, kQKV);
                project(h, H, l.in_norm[kProjK], o, l.k, kb, kQKV);
                project(h, H, l.in_norm[kProjV], o, l.v, vb, kQKV);
            } else {  // one quantization for q, k and v, one job
                c.quantize(h, T, H, kpx, xq, xs, sum);
                clock.mark(kNorms);
                const TernaryOut qkv[3] = {{l.q, q}, {l.k, kb}, {l.v, vb}};
                c.ternary(qkv, 3, xq, kpx, xs, sum, T);
                clock.mark(kQKV);
            }
            if (l.q_norm) {  // per head: rows of head_dim
                c.rmsnorm(q, l.q_norm, T * Hq_, D_, eps_, q);
                c.rmsnorm(kb, l.k_norm, T * Hkv_, D_, eps_, kb);
                clock.mark(kNorms);
            }
            c.rope(q, T, Hq_, D_, ropes[l.rope], neox_);
            c.rope(kb, T, Hkv_, D_, ropes[l.rope], neox_);
            decode.clear();
            for (const Segment &s : segs) {  // each sequence over its own cache
                const float *ks = kb + s.t0 * KV, *vs = vb + s.t0 * KV;
                if (kv_f16) {
                    c.to_f16(ks, static_cast<uint16_t *>(s.kc[i]) + s.start * KV, s.n * KV);
                    c.to_f16(vs, static_cast<uint16_t *>(s.vc[i]) + s.start * KV, s.n * KV);
                } else {
                    std::memcpy(static_cast<float *>(s.kc[i]) + s.start * KV, ks, sizeof(float) * s.n * KV);
                    std::memcpy(static_cast<float *>(s.vc[i]) + s.start * KV, vs, sizeof(float) * s.n * KV);
                }
                const AttentionArgs at{q + s.t0 * Q, s.kc[i], s.vc[i], a + s.t0 * Q, s.n, Hq_, Hkv_, D_,
                                       s.start, scale, kv_f16, l.window};
                if (s.n == 1) decode.push_back(at);  // the decode tokens: one job for all, below
                else c.attention(at);  // (a prompt chunk's attention counts as rope_kv_store)
            }
            clock.mark(kRopeStore);
            c.attention_decode_many(decode.data(), static_cast<int64_t>(decode.size()));
            clock.mark(kAttention);
            if (l.attn_sub_norm) c.rmsnorm(a, l.attn_sub_norm, T, Q, eps_, a);
            project(a, Q, l.in_norm[kProjO], a, l.o, o, kO);
            if (l.post_attn_norm) c.rmsnorm(o, l.post_attn_norm, T, H, eps_, o);
            for (int64_t j = 0; j < T * H; ++j) x[j] += o[j];
            clock.mark(kO);
            // feed-forward
            c.rmsnorm(x, l.ffn_norm, T, H, eps_, h);
            if (own_norms) {
                project(h, H, l.in_norm[kProjGate], o, l.gate, g, kGateUp);
                project(h, H, l.in_norm[kProjUp], o, l.up, u, kGateUp);
            } else {
                c.quantize(h, T, H, kpx, xq, xs, sum);
                clock.mark(kNorms);
                const TernaryOut gu[2] = {{l.gate, g}, {l.up, u}};
                c.ternary(gu, 2, xq, kpx, xs, sum, T);
                clock.mark(kGateUp);
            }
            c.gated(act_, g, u, g, T, F);
            clock.mark(kGated);
            if (l.ffn_sub_norm) c.rmsnorm(g, l.ffn_sub_norm, T, F, eps_, g);
            project(g, F, l.in_norm[kProjDown], g, l.down, o, kDown);
            if (l.post_ffn_norm) c.rmsnorm(o, l.post_ffn_norm, T, H, eps_, o);
            for (int64_t j = 0; j < T * H; ++j) x[j] += o[j];
            clock.mark(kDown);
        }
        if (head == Head::kNone) return;
        if (head == Head::kHidden) {
            c.rmsnorm(x, output_norm_, T, H, eps_, logits);
            clock.mark(kNorms);
            return;
        }
        // the rows that get logits, gathered into o when they are not x's last n
        int64_t n = 1;
        const float *rows = x + (T - 1) * H;
        if (head == Head::kAll) {
            n = T;
            rows = x;
        } else if (head == Head::kLastOfEach) {
            n = static_cast<int64_t>(segs.size());
            for (int64_t j = 0; j < n; ++j)
                std::memcpy(o + j * H, x + (segs[j].t0 + segs[j].n - 1) * H, sizeof(float) * H);
            rows = o;
        }
        c.rmsnorm(rows, output_norm_, n, H, eps_, h);
        clock.mark(kNorms);
        if (head_i8_ && head_.ptr) {
            // rows read with pread where the table's file is known (see read_embedding_from)
            const RowSource source{[](const void *ctx, int64_t r, void *buf) {
                                       return static_cast<const Table *>(ctx)->raw_row(r, buf);
                                   },
                                   &head_};
            head_checked_rows_ += c.dense_i8_checked(*head_i8_, head_.ptr, head_.f16, h, n, logits, xq, xs, sum,
                                                     head_.fd >= 0 ? &source : nullptr);
            head_checked_tokens_ += n;
        } else if (head_i8_) c.dense_i8(*head_i8_, h, n, logits, xq, xs, sum);
        else c.dense(head_.ptr, head_.f16, head_.rows, H, h, n, logits);
        clock.mark(kHead);
    }

    std::vector<py::object> keep_;  // the arrays whose memory the pointers below use
    const KernelTable *k_;
    int64_t H_, Hq_, Hkv_, D_, rot_dim_, F_ = 0, vocab_ = 0;
    int64_t kp_h_ = 0, kp_q_ = 0, kp_f_ = 0, kp_head_ = 0;
    double eps_, linear_eps_;
    std::vector<double> thetas_;  // the layers' rope bases, each once
    bool neox_ = true;
    Compute::Activation act_ = Compute::Activation::kSilu;
    Table embedding_, head_;  // head_: the float head, or the int8 head's check table (or none)
    std::shared_ptr<DenseI8> head_i8_;
    const float *output_norm_ = nullptr;
    std::vector<Layer> layers_;
    std::vector<std::shared_ptr<TernaryMatrix>> matrices_;
    Buffer scratch_;
    size_t scratch_floats_ = 0;
    int64_t head_checked_tokens_ = 0, head_checked_rows_ = 0;
    bool timing_ = false;
    std::array<double, kOps> op_seconds_{};
    int64_t op_passes_ = 0;
    std::mutex mu_;
};

}  // namespace

void register_model(py::module_ &m) {
    py::class_<CpuModel>(m, "CpuModel",
        "A whole BitNet b1.58 model on the CPU kernels: one call per forward pass.")
        .def(py::init<const std::string &, int64_t, int64_t, int64_t, int64_t, int64_t, double,
                      const std::string &, double, const std::string &, py::array, py::object, py::array,
                      py::list, py::object, double>(),
             py::arg("isa"), py::arg("hidden"), py::arg("heads"), py::arg("kv_heads"), py::arg("head_dim"),
             py::arg("rot_dim"), py::arg("rope_theta"), py::arg("rope_style"), py::arg("eps"),
             py::arg("ffn_activation"), py::arg("embedding"), py::arg("head"), py::arg("output_norm"),
             py::arg("layers"), py::arg("head_check") = py::none(), py::arg("linear_eps") = -1.0)
        .def("read_head_from", &CpuModel::read_head_from, py::arg("fd"), py::arg("offset"),
             "Read the checked int8 head's float rows with pread from `fd` (its table at byte `offset`).")
        .def("read_embedding_from", &CpuModel::read_embedding_from, py::arg("fd"), py::arg("offset"),
             "Read embedding rows with pread from `fd` (the table at byte `offset`); the caller keeps it open.")
        .def_property_readonly("vocab", &CpuModel::vocab)
        .def_property_readonly("num_layers", &CpuModel::num_layers)
        .def("set_op_timing", &CpuModel::set_op_timing, py::arg("enabled"),
             "Time each op of the passes from now on (True), or stop (False); resets the totals.")
        .def("op_times", &CpuModel::op_times,
             "Seconds by op over the timed passes, and their number ('passes').")
        .def_property_readonly("head_checks", &CpuModel::head_checks,
                               "(tokens, logits recomputed exactly) of the checked int8 head so far")
        .def("forward", &CpuModel::forward, py::arg("ids"), py::arg("k_caches"), py::arg("v_caches"),
             py::arg("start"), py::arg("all_logits"), py::arg("threads"))
        .def("forward_batch", &CpuModel::forward_batch, py::arg("ids"), py::arg("counts"), py::arg("starts"),
             py::arg("k_caches"), py::arg("v_caches"), py::arg("threads"),
             "One step of several sequences in one pass; the logits of each one's last token.")
        .def("hidden_batch", &CpuModel::hidden_batch, py::arg("ids"), py::arg("counts"), py::arg("starts"),
             py::arg("k_caches"), py::arg("v_caches"), py::arg("threads"),
             "The output-normed hidden states [T, hidden] of several sequences (an embedding model's pass).")
        .def_property_readonly("has_head", &CpuModel::has_head);
}

}  // namespace bitnet
