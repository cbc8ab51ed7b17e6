// Causal grouped-query attention over a KV cache [S, Hkv, D].
// One workgroup per (query t, head h); query t sits at position start + t.
// scores scratch: [T * Hq * S] f32. F16: the caches hold two halves per u32.
struct Params { t: u32, hq: u32, hkv: u32, d: u32, s_max: u32, start: u32, scale: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#include kv_cache
@group(0) @binding(4) var<storage, read_write> sc: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wg.x;
    let h = wg.y;
    let kvh = h / (p.hq / p.hkv);
    let n = p.start + t + 1u;
    let qb = (t * p.hq + h) * p.d;
    let sb = (t * p.hq + h) * p.s_max;
    var m = -3.0e38;
    for (var s = tid; s < n; s += WG) {
        let kb = (s * p.hkv + kvh) * p.d;
        var acc = 0.0;
        for (var i = 0u; i < p.d; i++) { acc += q[qb + i] * kval(kb + i); }
        acc *= p.scale;
        sc[sb + s] = acc;
        m = max(m, acc);
    }
    red[tid] = m;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (tid < k) { red[tid] = max(red[tid], red[tid + k]); }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var s = tid; s < n; s += WG) {
        let e = exp(sc[sb + s] - mx);
        sc[sb + s] = e;
        sum += e;
    }
    red[tid] = sum;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (tid < k) { red[tid] += red[tid + k]; }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    storageBarrier();
    workgroupBarrier();
    for (var i = tid; i < p.d; i += WG) {
        var acc = 0.0;
        for (var s = 0u; s < n; s++) { acc += sc[sb + s] * vval((s * p.hkv + kvh) * p.d + i); }
        o[qb + i] = acc * inv;
    }
}
