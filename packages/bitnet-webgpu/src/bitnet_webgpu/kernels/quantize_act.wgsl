// Per-token absmax int8 quantization: one workgroup per row.
// xq[t] packs four int8 values per u32 (little-endian bytes), padded with
// zeros to `kw` words; scale[t] = 127 / max(max|x|, 1e-5); xsum[t] = sum(xq).
struct Params { k: u32, kw: u32, rows: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;
@group(0) @binding(3) var<storage, read_write> scale: array<f32>;
@group(0) @binding(4) var<storage, read_write> xsum: array<i32>;

const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> redi: array<i32, 256>;

fn q8(v: f32, s: f32) -> i32 {
    return i32(clamp(round(v * s), -128.0, 127.0));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wg.x;
    let base = t * p.k;
    var m = 0.0;
    for (var i = tid; i < p.k; i += WG) { m = max(m, abs(x[base + i])); }
    red[tid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    let sc = 127.0 / max(red[0], 1e-5);
    var acc = 0;
    for (var w = tid; w < p.kw; w += WG) {
        var word = 0u;
        for (var b = 0u; b < 4u; b++) {
            let i = w * 4u + b;
            if (i < p.k) {
                let q = q8(x[base + i], sc);
                acc += q;
                word |= (u32(q) & 0xffu) << (8u * b);
            }
        }
        xq[t * p.kw + w] = word;
    }
    redi[tid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { redi[tid] += redi[tid + s]; }
        workgroupBarrier();
    }
    if (tid == 0u) {
        scale[t] = sc;
        xsum[t] = redi[0];
    }
}
