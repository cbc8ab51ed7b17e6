// Included by the fused norm+quantize shaders (#include row_quant): one workgroup
// of 256 owns one row; invocation tid owns the int8 words tid, tid + 256, ...
// (elements 4w .. 4w+3), so every phase reads back only what it wrote itself.
// The including shader defines value(t, i) (element i of row t, computed from
// its inputs), the norm weights g and the outputs xq, scale and xsum.
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> redi: array<i32, 256>;

fn reduce_sum(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_max(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_isum(tid: u32, v: i32) -> i32 {
    redi[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { redi[tid] += redi[tid + s]; }
        workgroupBarrier();
    }
    return redi[0];
}

fn q8(v: f32, s: f32) -> i32 {
    return i32(clamp(round(v * s), -128.0, 127.0));
}

// Row t of n values value(t, i): rmsnorm with weights g, then absmax int8 codes
// packed four a word into xq (kw words a row), the row's scale and code sum.
fn norm_quant_row(tid: u32, t: u32, n: u32, kw: u32, eps: f32) {
    var ss = 0.0;
    for (var i = tid; i < n; i += WG) { let v = value(t, i); ss += v * v; }
    let inv = inverseSqrt(reduce_sum(tid, ss) / f32(n) + eps);
    var m = 0.0;
    for (var i = tid; i < n; i += WG) { m = max(m, abs(value(t, i) * inv * g[i])); }
    let sc = 127.0 / max(reduce_max(tid, m), 1e-5);
    var acc = 0;
    for (var w = tid; w < kw; w += WG) {
        var word = 0u;
        for (var b = 0u; b < 4u; b++) {
            let i = w * 4u + b;
            if (i < n) {
                let q = q8(value(t, i) * inv * g[i], sc);
                acc += q;
                word |= (u32(q) & 0xffu) << (8u * b);
            }
        }
        xq[t * kw + w] = word;
    }
    let total = reduce_isum(tid, acc);
    if (tid == 0u) {
        scale[t] = sc;
        xsum[t] = total;
    }
}
