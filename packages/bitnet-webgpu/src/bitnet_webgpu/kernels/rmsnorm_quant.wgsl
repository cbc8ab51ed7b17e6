// rmsnorm(x, g) then per-row absmax int8 quantization, one workgroup per row:
// the same result as rmsnorm followed by quantize_act, without the float row
// in between. xq packs four int8 per u32 (rows padded to kw words).
struct Params { k: u32, kw: u32, eps: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<u32>;
@group(0) @binding(4) var<storage, read_write> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> xsum: array<i32>;

#include row_quant

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wg.x;
    let base = t * p.k;
    var ss = 0.0;
    for (var i = tid; i < p.k; i += WG) { let v = x[base + i]; ss += v * v; }
    let inv = inverseSqrt(reduce_sum(tid, ss) / f32(p.k) + p.eps);
    var m = 0.0;
    for (var i = tid; i < p.k; i += WG) { m = max(m, abs(x[base + i] * inv * g[i])); }
    let sc = 127.0 / max(reduce_max(tid, m), 1e-5);
    var acc = 0;
    for (var w = tid; w < p.kw; w += WG) {
        var word = 0u;
        for (var b = 0u; b < 4u; b++) {
            let i = w * 4u + b;
            if (i < p.k) {
                let q = q8(x[base + i] * inv * g[i], sc);
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
