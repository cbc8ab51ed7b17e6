#version 450
#extension GL_GOOGLE_include_directive : require
// out[i] = f(a[i], b[i % b_size]) for the elementwise ops (OP: 0 silu, 1 relu2,
// 2 silu_mul, 3 relu2_mul, 4 add, 5 mul); b repeats along the leading axes.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint total; uint b_size; } p;

#include "act.glsl"

void main() {
    for (uint i = gl_GlobalInvocationID.x; i < p.total; i += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        float v = a[i];
        if (OP == 0u) o[i] = silu(v);
        else if (OP == 1u) o[i] = relu2(v);
        else {
            float w = b[i % p.b_size];
            if (OP == 2u) o[i] = silu(v) * w;
            else if (OP == 3u) o[i] = relu2(v) * w;
            else if (OP == 4u) o[i] = v + w;
            else o[i] = v * w;
        }
    }
}
