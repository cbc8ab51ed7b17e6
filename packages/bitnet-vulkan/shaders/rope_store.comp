#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary embedding and KV-cache append of one forward pass, from the fused q|k|v matmul
// output qkv [T, (Hq + 2 Hkv) * D]: q rotated into q [T, Hq, D]; k rotated and v copied
// into the caches [S, Hkv, D] at rows pos .. pos + T - 1, pos read from step[first] (a buffer
// the host rewrites, so a recorded decode step replays unchanged). `first`: the step's row of
// the sequence's first token (a batched step: one dispatch a sequence). cos/sin tables
// [context, rot_dim / 2] are computed on the host in float64 (rope.glsl).
// One invocation writes two consecutive elements (one word of a float16 cache: F16).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool NEOX = true;
layout(constant_id = 2) const bool F16 = false;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer C { float cos_t[]; };
layout(std430, binding = 2) readonly buffer S { float sin_t[]; };
layout(std430, binding = 3) writeonly buffer Q { float q[]; };
layout(std430, binding = 4) writeonly buffer K { uint kc[]; };
layout(std430, binding = 5) writeonly buffer V { uint vc[]; };
layout(std430, binding = 6) readonly buffer St { uint step[]; };
layout(push_constant) uniform P {
    uint tokens; uint q_heads; uint kv_heads; uint dim; uint rot_dim; uint first;
} p;

#include "half.glsl"

#define ROPE_SRC(i) qkv[i]
#define ROPE_ROT p.rot_dim
#include "rope.glsl"

void main() {
    uint heads = p.q_heads + 2u * p.kv_heads;
    uint pairs = p.dim / 2u;
    uint total = p.tokens * heads * pairs;
    uint start = step[p.first];
    for (uint e = gl_GlobalInvocationID.x; e < total; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint th = e / pairs, d = 2u * (e - th * pairs);
        uint t = th / heads, h = th - t * heads;
        uint row = (p.first * heads + th) * p.dim, pos = start + t;
        if (h < p.q_heads) {
            uint o = ((p.first + t) * p.q_heads + h) * p.dim + d;
            q[o] = rotated(row, d, pos);
            q[o + 1u] = rotated(row, d + 1u, pos);
            continue;
        }
        bool is_k = h < p.q_heads + p.kv_heads;
        uint kvh = is_k ? h - p.q_heads : h - p.q_heads - p.kv_heads;
        float a = is_k ? rotated(row, d, pos) : qkv[row + d];
        float b = is_k ? rotated(row, d + 1u, pos) : qkv[row + d + 1u];
        uint o = (pos * p.kv_heads + kvh) * p.dim + d;
        if (F16) {
            uint word = pack_halves(a, b);
            if (is_k) kc[o >> 1] = word; else vc[o >> 1] = word;
        } else if (is_k) {
            kc[o] = floatBitsToUint(a); kc[o + 1u] = floatBitsToUint(b);
        } else {
            vc[o] = floatBitsToUint(a); vc[o + 1u] = floatBitsToUint(b);
        }
    }
}
