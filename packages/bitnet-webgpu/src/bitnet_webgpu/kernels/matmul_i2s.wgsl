// Ternary x int8 matmul: y[t, n] = (sum_k xq[t,k] * w[n,k]) * wscale[n] / xscale[t].
// Weights: 16 codes (value+1 in 0..2) per u32; code of column 16*w + 4*j + i
// sits at bits 8*i + 2*j, so (word >> 2j) & 0x03030303 lines up with the
// activation word j (four int8). dot(x, code) - sum(x) = dot(x, code - 1).
// One workgroup per output row n (x + z * gx) and tile of TT tokens; threads split the row.
// ADD: y += the product (a residual add in the epilogue).
struct Params { n: u32, kw16: u32, t: u32, xkw: u32, gx: u32, p0: u32, p1: u32, p2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> wscale: array<f32>;
@group(0) @binding(3) var<storage, read> xq: array<u32>;
@group(0) @binding(4) var<storage, read> xscale: array<f32>;
@group(0) @binding(5) var<storage, read> xsum: array<i32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;

const WG: u32 = 64u;
const TT: u32 = 4u;
var<workgroup> red: array<i32, 256>;  // WG * TT

#include int8_dot

fn store(i: u32, v: f32) {
#ifdef ADD
    y[i] += v;
#else
    y[i] = v;
#endif
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
#ifdef ROWS
    // CPU-like devices (lavapipe): one invocation per output row, no barriers.
    let n = (wg.x + wg.z * p.gx) * WG + tid;
    if (n >= p.n) { return; }
    for (var t = 0u; t < p.t; t++) {
        var acc = 0;
        for (var wi = 0u; wi < p.kw16; wi++) {
            let word = w[n * p.kw16 + wi];
            let xb = t * p.xkw + wi * 4u;
            acc += dot4(xq[xb], word & 0x03030303u);
            acc += dot4(xq[xb + 1u], (word >> 2u) & 0x03030303u);
            acc += dot4(xq[xb + 2u], (word >> 4u) & 0x03030303u);
            acc += dot4(xq[xb + 3u], (word >> 6u) & 0x03030303u);
        }
        store(t * p.n + n, f32(acc - xsum[t]) * wscale[n] / xscale[t]);
    }
#else
    let n = wg.x + wg.z * p.gx;
    if (n >= p.n) { return; }
    let t0 = wg.y * TT;
    var acc = array<i32, 4>(0, 0, 0, 0);
    for (var wi = tid; wi < p.kw16; wi += WG) {
        let word = w[n * p.kw16 + wi];
        for (var j = 0u; j < 4u; j++) {
            let wb = (word >> (2u * j)) & 0x03030303u;
            for (var tt = 0u; tt < TT; tt++) {
                let t = t0 + tt;
                if (t < p.t) {
                    acc[tt] += dot4(xq[t * p.xkw + wi * 4u + j], wb);
                }
            }
        }
    }
    for (var tt = 0u; tt < TT; tt++) { red[tt * WG + tid] = acc[tt]; }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            for (var tt = 0u; tt < TT; tt++) { red[tt * WG + tid] += red[tt * WG + tid + s]; }
        }
        workgroupBarrier();
    }
    if (tid < TT) {
        let t = t0 + tid;
        if (t < p.t) {
            let dotv = red[tid * WG] - xsum[t];
            store(t * p.n + n, f32(dotv) * wscale[n] / xscale[t]);
        }
    }
#endif
}
