#version 450
// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight; one workgroup per row, or with
// USE_SUBGROUP one subgroup per row (subgroupAdd, no barriers).
layout(local_size_x_id = 0) in;
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float weight[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint rows; uint cols; float eps; } p;

#ifdef USE_SUBGROUP
void main() {
    uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
    for (uint t = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; t < p.rows;
         t += gl_NumWorkGroups.x * gl_NumSubgroups) {
        uint base = t * p.cols;
        float s = 0.0;
        for (uint k = lane; k < p.cols; k += lanes) s += x[base + k] * x[base + k];
        float inv = 1.0 / sqrt(subgroupAdd(s) / float(p.cols) + p.eps);
        for (uint k = lane; k < p.cols; k += lanes) y[base + k] = x[base + k] * inv * weight[k];
    }
}
#else
shared float red[gl_WorkGroupSize.x];

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint t = gl_WorkGroupID.x; t < p.rows; t += gl_NumWorkGroups.x) {
        uint base = t * p.cols;
        float s = 0.0;
        for (uint k = lid; k < p.cols; k += gl_WorkGroupSize.x) s += x[base + k] * x[base + k];
        red[lid] = s;
        barrier();
        for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
            if (lid < h) red[lid] += red[lid + h];
            barrier();
        }
        float inv = 1.0 / sqrt(red[0] / float(p.cols) + p.eps);
        barrier();
        for (uint k = lid; k < p.cols; k += gl_WorkGroupSize.x)
            y[base + k] = x[base + k] * inv * weight[k];
    }
}
#endif
