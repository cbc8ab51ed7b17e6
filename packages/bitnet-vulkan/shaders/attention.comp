#version 450
// Causal grouped-query attention over a KV cache [S, Hkv, D]: query t (head h) sits
// at position start + t and sees cache rows 0 .. start + t. One workgroup per (t, h):
// scores of WG positions at a time into shared memory, online softmax, thread i owns
// output dims i, i + WG, ... (D <= MAX_SLOTS * WG). `start` comes from a small buffer the
// host rewrites every step (not a push constant), so a recorded decode step replays unchanged.
// F16: the cache holds float16 pairs a uint word. SPLIT (split-K, flash-decoding): one
// workgroup per (t, h, split) over 1/splits of the rows; it writes [m, l, acc[D]] (running
// max, sum of exp, unnormalized output) for norm_quant.comp (MODE 3) to combine, at record
// ((row * Hq + h) * stride + split) (stride >= splits). `first`: the step's row of the
// sequence's first token, its position in step[first] (a batched step: a dispatch a sequence).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool F16 = false;
#define MAX_SLOTS 4

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kc[]; };
layout(std430, binding = 2) readonly buffer V { uint vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer S { uint step[]; };
layout(push_constant) uniform P {
    uint tokens; uint q_heads; uint kv_heads; uint dim; float scale; uint splits;
    uint first; uint stride;
} p;

#define CACHE(buf, i) (F16 ? unpackHalf2x16(buf[(i) >> 1])[(i) & 1u] : uintBitsToFloat(buf[i]))

shared float sc[gl_WorkGroupSize.x];
shared float red[gl_WorkGroupSize.x];

void main() {
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint group = p.q_heads / p.kv_heads;
    uint start = step[p.first];
#ifdef SPLIT
    uint splits = p.splits;
#else
    uint splits = 1u;
#endif
    for (uint job = gl_WorkGroupID.x; job < p.tokens * p.q_heads * splits; job += gl_NumWorkGroups.x) {
        uint th = job / splits, part = job - th * splits;
        uint t = th / p.q_heads, h = th % p.q_heads, kvh = h / group;
        uint qbase = ((p.first + t) * p.q_heads + h) * p.dim;
        uint n = start + t + 1u;
        uint chunk = (n + splits - 1u) / splits;
        uint lo = min(n, part * chunk), hi = min(n, lo + chunk);
        uint kv_stride = p.kv_heads * p.dim;
        float m = -1.0 / 0.0, l = 0.0;
        float acc[MAX_SLOTS];
        for (uint j = 0u; j < MAX_SLOTS; j++) acc[j] = 0.0;
        for (uint base = lo; base < hi; base += wg) {
            uint s = base + lid;
            float score = -1.0 / 0.0;
            if (s < hi) {
                uint kb = s * kv_stride + kvh * p.dim;
                float d = 0.0;
                for (uint i = 0u; i < p.dim; i++) d += q[qbase + i] * CACHE(kc, kb + i);
                score = d * p.scale;
            }
            red[lid] = score;
            barrier();
            for (uint r = wg / 2; r > 0; r >>= 1) {
                if (lid < r) red[lid] = max(red[lid], red[lid + r]);
                barrier();
            }
            float m_new = max(m, red[0]);
            sc[lid] = s < hi ? exp(score - m_new) : 0.0;
            barrier();
            float corr = exp(m - m_new);  // 0 on the first chunk (m = -inf)
            uint cnt = min(wg, hi - base);
            float psum = 0.0;
            for (uint j = 0u; j < cnt; j++) psum += sc[j];
            l = l * corr + psum;
            for (uint slot = 0u; slot < MAX_SLOTS; slot++) {
                uint d = lid + slot * wg;
                if (d < p.dim) {
                    float a = acc[slot] * corr;
                    uint vb = base * kv_stride + kvh * p.dim + d;
                    for (uint j = 0u; j < cnt; j++) a += sc[j] * CACHE(vc, vb + j * kv_stride);
                    acc[slot] = a;
                }
            }
            m = m_new;
            barrier();
        }
#ifdef SPLIT
        uint rec = (((p.first + t) * p.q_heads + h) * p.stride + part) * (p.dim + 2u);
        if (lid == 0u) { o[rec] = m; o[rec + 1u] = l; }
        for (uint slot = 0u; slot < MAX_SLOTS; slot++) {
            uint d = lid + slot * wg;
            if (d < p.dim) o[rec + 2u + d] = acc[slot];
        }
#else
        for (uint slot = 0u; slot < MAX_SLOTS; slot++) {
            uint d = lid + slot * wg;
            if (d < p.dim) o[qbase + d] = acc[slot] / l;
        }
#endif
    }
}
