// RMSNorm over the last axis: one workgroup per row.
struct Params { d: u32, rows: u32, eps: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let base = wg.x * p.d;
    var s = 0.0;
    for (var i = tid; i < p.d; i += WG) { let v = x[base + i]; s += v * v; }
    red[tid] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (tid < k) { red[tid] += red[tid + k]; }
        workgroupBarrier();
    }
    let inv = inverseSqrt(red[0] / f32(p.d) + p.eps);
    for (var i = tid; i < p.d; i += WG) { y[base + i] = x[base + i] * inv * g[i]; }
}
