// act(gate) * up, rmsnorm with the ffn sub-norm, int8 quantization: one
// workgroup per row of gu = [gate | up] (2f floats). act 0 silu, 1 relu^2.
struct Params { f: u32, kw: u32, act: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gu: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<u32>;
@group(0) @binding(4) var<storage, read_write> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> xsum: array<i32>;

#include row_quant

fn value(base: u32, i: u32) -> f32 {
    let a = gu[base + i];
    let b = gu[base + p.f + i];
    if (p.act == 0u) { return a / (1.0 + exp(-a)) * b; }
    let r = max(a, 0.0);
    return r * r * b;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wg.x;
    let base = t * 2u * p.f;
    var ss = 0.0;
    for (var i = tid; i < p.f; i += WG) { let v = value(base, i); ss += v * v; }
    let inv = inverseSqrt(reduce_sum(tid, ss) / f32(p.f) + p.eps);
    var m = 0.0;
    for (var i = tid; i < p.f; i += WG) { m = max(m, abs(value(base, i) * inv * g[i])); }
    let sc = 127.0 / max(reduce_max(tid, m), 1e-5);
    var acc = 0;
    for (var w = tid; w < p.kw; w += WG) {
        var word = 0u;
        for (var b = 0u; b < 4u; b++) {
            let i = w * 4u + b;
            if (i < p.f) {
                let q = q8(value(base, i) * inv * g[i], sc);
                acc += q;
                word |= (u32(q) & 0xffu) << (8u * b);
            }
        }
        xq[t * p.kw + w] = word;
    }
    let total = reduce_isum(tid, acc);
    if (tid == 0u) {
        scale[t] = sc;
        xsum[t] = total;
    }
}
