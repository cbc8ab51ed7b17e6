#version 450
// Rotary embedding of x [T, H, D] with per-token cos/sin tables [T, rot_dim/2]
// (computed on the host in float64 from the positions). NEOX pairs (i, i + half),
// NORM pairs (2i, 2i + 1); dims >= rot_dim pass through. One invocation an element.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool NEOX = true;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer C { float cos_t[]; };
layout(std430, binding = 2) readonly buffer S { float sin_t[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint total; uint heads; uint dim; uint rot_dim; } p;

void main() {
    uint half_dim = p.rot_dim / 2u;
    for (uint e = gl_GlobalInvocationID.x; e < p.total; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint d = e % p.dim;
        uint row = e - d;               // start of this (t, h) vector
        uint t = e / (p.heads * p.dim);
        if (d >= p.rot_dim) { y[e] = x[e]; continue; }
        uint i; float a, b; bool first;
        if (NEOX) {
            first = d < half_dim;
            i = first ? d : d - half_dim;
            a = x[row + i]; b = x[row + i + half_dim];
        } else {
            first = (d & 1u) == 0u;
            i = d >> 1;
            a = x[row + 2u * i]; b = x[row + 2u * i + 1u];
        }
        float c = cos_t[t * half_dim + i], s = sin_t[t * half_dim + i];
        y[e] = first ? a * c - b * s : b * c + a * s;
    }
}
