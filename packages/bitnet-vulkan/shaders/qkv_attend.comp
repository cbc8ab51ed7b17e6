#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : enable
// The first of the four launches of one token's decode layer (VulkanRunner, issue 48).
// Workgroup h, query head h of kv head g = h / (Hq / Hkv):
//   1. xq = int8(rmsnorm(x, nw)) of the whole hidden row, into shared memory (norm_row.glsl);
//   2. the rows of q head h, k head g and v head g of W = q|k|v (a subgroup a row, exact
//      int32 sums, matmul_i2s.comp's epilogue);
//   3. q and k rotated at pos = step[0] (rope.glsl); the group's first head writes k and v
//      into cache row pos (float32, or F16 float16 pairs a word as rope_store.comp);
//   4. attention over cache rows 0 .. pos in `splits` splits one after the other, as
//      attention.comp's SPLIT jobs do (chunks of AWG keys: the same sums), the current
//      key and value read from shared memory (the writer is another workgroup), each
//      split's [m, l, acc] kept (acc in `parts`: this head's records, read back by the
//      invocation that wrote them);
//   5. the splits combined as norm_quant.comp's MODE 3 does -> att[h * dim ..].
// So the values are those of norm_quant + matmul_i2s + rope_store + attention_split +
// the combine's values, bit for bit where the subgroups have one size.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool NEOX = true;
layout(constant_id = 2) const bool F16 = false;
layout(constant_id = 3) const uint XL_WORDS = 64u;  // >= 4 * w_words
layout(constant_id = 4) const uint AWG = 64u;  // keys a chunk (attention_split's workgroup)
layout(constant_id = 5) const uint HD = 64u;  // head dim
const uint MAX_SPLITS = 16u;
const uint MAX_WEIGHTS = 2048u;  // norm_quant.comp's: heads x splits of shared weights

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float weight[]; };
layout(std430, binding = 2) readonly buffer W { uint w[]; };
layout(std430, binding = 3) readonly buffer S { float scales[]; };
layout(std430, binding = 4) readonly buffer C { float cos_t[]; };
layout(std430, binding = 5) readonly buffer Sn { float sin_t[]; };
layout(std430, binding = 6) buffer K { uint kc[]; };
layout(std430, binding = 7) buffer V { uint vc[]; };
layout(std430, binding = 8) readonly buffer St { uint step[]; };
layout(std430, binding = 9) buffer Pa { float parts[]; };
layout(std430, binding = 10) writeonly buffer A { float att[]; };
layout(push_constant) uniform P {
    uint cols; uint words; float eps; uint w_words; uint q_heads; uint kv_heads; uint dim;
    uint rot_dim; float scale; uint splits;
} p;

#include "quant.glsl"
#include "half.glsl"

shared uint xl[XL_WORDS];  // the hidden row's int8 codes, zeros to 4 * w_words
shared float hv[3u * HD];  // q, k, v rows of this head (before rope)
shared float qv[HD];  // q rotated
shared uint kcur[HD], vcur[HD];  // the current key and value as the cache holds them
shared float ov[HD];  // a split's unnormalized output (invocation i: dims i, i + WG, ..)
shared float score[AWG], e[AWG];  // a chunk's scores, their exp(score - m)
shared float split_m[MAX_SPLITS], split_l[MAX_SPLITS], split_w[MAX_SPLITS];

vec4 word_values(uint t, uint wd) {
    vec4 v = vec4(0.0);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint k = 4u * wd + i;
        if (k < p.cols) v[i] = x[k];
    }
    return v;
}
#define NR_COLS p.cols
#define NR_WORDS p.words
#define NR_EPS p.eps
#define NR_WEIGHT(k) weight[k]
#define NR_STORE(t, wd, word) xl[wd] = (word)
#include "norm_row.glsl"

#define XQ_AT(i) xl[i]
#include "i2s_dot.glsl"

#define ROPE_SRC(i) hv[i]
#define ROPE_ROT p.rot_dim
#include "rope.glsl"

#define CACHE(buf, i) (F16 ? unpackHalf2x16(buf[(i) >> 1])[(i) & 1u] : uintBitsToFloat(buf[i]))

// e^(m - M) of a split's running max m (empty splits: m = M = -inf gives 1; l and acc are 0)
float split_scale(float m, float mx) { return m == mx ? 1.0 : exp(m - mx); }

void main() {
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint h = gl_WorkGroupID.x, g = h / (p.q_heads / p.kv_heads), dim = p.dim;
    float xs = norm_quant_row(0u);
    for (uint wd = p.words + lid; wd < 4u * p.w_words; wd += wg) xl[wd] = 0u;
    barrier();
    for (uint i = gl_SubgroupID; i < 3u * dim; i += gl_NumSubgroups) {
        uint part = min(i / dim, 2u);
        uint row = (part == 0u ? h : p.q_heads + (part - 1u) * p.kv_heads + g) * dim + i - part * dim;
        int acc = 0;
        for (uint k = gl_SubgroupInvocationID; k < p.w_words; k += gl_SubgroupSize)
            acc += dot16(w[row * p.w_words + k], 4u * k);
        int total = subgroupAdd(acc);
        if (subgroupElect()) hv[i] = float(total) * scales[row] / xs;
    }
    barrier();
    uint pos = step[0];
    bool writer = h % (p.q_heads / p.kv_heads) == 0u;
    uint crow = (pos * p.kv_heads + g) * dim;
    for (uint d = 2u * lid; d < dim; d += 2u * wg) {  // two elements (a float16 word) each
        qv[d] = rotated(0u, d, pos);
        qv[d + 1u] = rotated(0u, d + 1u, pos);
        float ka = rotated(dim, d, pos), kb = rotated(dim, d + 1u, pos);
        float va = hv[2u * dim + d], vb = hv[2u * dim + d + 1u];
        if (F16) {
            kcur[d >> 1] = pack_halves(ka, kb);
            vcur[d >> 1] = pack_halves(va, vb);
            if (writer) { kc[(crow + d) >> 1] = kcur[d >> 1]; vc[(crow + d) >> 1] = vcur[d >> 1]; }
        } else {
            kcur[d] = floatBitsToUint(ka); kcur[d + 1u] = floatBitsToUint(kb);
            vcur[d] = floatBitsToUint(va); vcur[d + 1u] = floatBitsToUint(vb);
            if (writer) {
                kc[crow + d] = kcur[d]; kc[crow + d + 1u] = kcur[d + 1u];
                vc[crow + d] = vcur[d]; vc[crow + d + 1u] = vcur[d + 1u];
            }
        }
    }
    barrier();
    uint kv_stride = p.kv_heads * dim;
    uint n = pos + 1u, chunk = (n + p.splits - 1u) / p.splits;
    for (uint s = 0u; s < p.splits; s++) {
        uint lo = min(n, s * chunk), hi = min(n, lo + chunk);
        float m = -1.0 / 0.0, l = 0.0;
        for (uint d = lid; d < dim; d += wg) ov[d] = 0.0;
        for (uint base = lo; base < hi; base += AWG) {
            uint cnt = min(AWG, hi - base);
            for (uint j = lid; j < AWG; j += wg) {
                uint r = base + j;
                float sc = -1.0 / 0.0;
                if (r < hi) {
                    float d = 0.0;
                    if (r == pos) {
                        for (uint i = 0u; i < dim; i++) d += qv[i] * CACHE(kcur, i);
                    } else {
                        uint kb = r * kv_stride + g * dim;
                        for (uint i = 0u; i < dim; i++) d += qv[i] * CACHE(kc, kb + i);
                    }
                    sc = d * p.scale;
                }
                score[j] = sc;
            }
            barrier();
            float mx = -1.0 / 0.0;
            for (uint j = 0u; j < cnt; j++) mx = max(mx, score[j]);
            float m_new = max(m, mx);
            for (uint j = lid; j < AWG; j += wg) e[j] = j < cnt ? exp(score[j] - m_new) : 0.0;
            barrier();
            float corr = exp(m - m_new);  // 0 on the first chunk (m = -inf)
            float psum = 0.0;
            for (uint j = 0u; j < cnt; j++) psum += e[j];
            l = l * corr + psum;
            uint cached = base + cnt == n ? cnt - 1u : cnt;  // the last key of all: current
            for (uint d = lid; d < dim; d += wg) {
                float a = ov[d] * corr;
                uint vb = base * kv_stride + g * dim + d;
                for (uint j = 0u; j < cached; j++) a += e[j] * CACHE(vc, vb + j * kv_stride);
                if (cached < cnt) a += e[cached] * CACHE(vcur, d);
                ov[d] = a;
            }
            m = m_new;
            barrier();
        }
        if (lid == 0u) { split_m[s] = m; split_l[s] = l; }
        for (uint d = lid; d < dim; d += wg) parts[(h * p.splits + s) * dim + d] = ov[d];
    }
    barrier();
    bool weights_shared = p.q_heads * p.splits <= MAX_WEIGHTS;
    float mx = -1.0 / 0.0;
    for (uint s = 0u; s < p.splits; s++) mx = max(mx, split_m[s]);
    if (weights_shared && lid == 0u) {
        float l = 0.0;
        for (uint s = 0u; s < p.splits; s++) l += split_l[s] * split_scale(split_m[s], mx);
        for (uint s = 0u; s < p.splits; s++) split_w[s] = split_scale(split_m[s], mx) / l;
    }
    barrier();
    for (uint d = lid; d < dim; d += wg) {
        float a = 0.0;
        if (weights_shared) {
            for (uint s = 0u; s < p.splits; s++) a += split_w[s] * parts[(h * p.splits + s) * dim + d];
        } else {
            float l = 0.0;
            for (uint s = 0u; s < p.splits; s++) {
                float sc = split_scale(split_m[s], mx);
                l += split_l[s] * sc;
                a += parts[(h * p.splits + s) * dim + d] * sc;
            }
            a = a / l;
        }
        att[h * dim + d] = a;
    }
}
