#version 450
#extension GL_GOOGLE_include_directive : require
// cache[start * row + i] = x[i] for i < count: one KV-cache append of float32 rows, into a
// float32 cache, or (F16) a float16 one (two elements a word, rounded to nearest even;
// one invocation a word, keeping the other half of a word at either end). `start` is read from a small buffer the host rewrites every step
// (not a push constant), so the recorded decode step can be replayed unchanged.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool F16 = false;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) buffer C { uint cache[]; };
layout(std430, binding = 2) readonly buffer S { uint step[]; };
layout(push_constant) uniform P { uint count; uint row_words; } p;

#include "half.glsl"

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (F16) {  // row_words: elements a row here
        uint first = step[0] * p.row_words, end = first + p.count;  // elements written
        uint w0 = first / 2u, words = (end + 1u) / 2u - w0;
        for (uint i = gl_GlobalInvocationID.x; i < words; i += stride) {
            uint w = w0 + i, old = cache[w];
            uint lo = 2u * w, hi = lo + 1u;
            uint a = lo >= first ? half_bits(uintBitsToFloat(x[lo - first])) : old & 0xFFFFu;
            uint b = hi < end ? half_bits(uintBitsToFloat(x[hi - first])) : old >> 16;
            cache[w] = a | (b << 16);
        }
        return;
    }
    uint base = step[0] * p.row_words;
    for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) cache[base + i] = x[i];
}
