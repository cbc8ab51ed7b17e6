#version 450
// cache[start * row_words + i] = x[i] for i < count: one KV-cache append, 32-bit elements.
// `start` is read from a small buffer the host rewrites every step (not a push constant),
// so the recorded decode step can be replayed unchanged.
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) buffer C { uint cache[]; };
layout(std430, binding = 2) readonly buffer S { uint step[]; };
layout(push_constant) uniform P { uint count; uint row_words; } p;

void main() {
    uint base = step[0] * p.row_words;
    for (uint i = gl_GlobalInvocationID.x; i < p.count; i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)
        cache[base + i] = x[i];
}
