// A decode token's attention block in one dispatch: workgroup h (query head h of
// kv head g = h / (hq / hkv)) normalises x (hidden floats) in int8, computes the
// rows of q head h and of k and v head g of W = q|k|v into hv, rotates q and k
// at the position inp[1], writes k and v into row pos of the caches [S, hkv, d]
// (the kv head's first query head does), attends over the cache in `splits`
// splits of ceil(n / splits) keys (n = inp[2]; four splits at a time, one in each
// quarter of the workgroup) and merges them into att, the first hq * d floats of
// `scratch` (the splits' partials follow). The current key and value are read
// from hv, never from the row being written. Bit for bit the chain rmsnorm_quant,
// matmul_i2s, rope_store, attn_split, attn_combine (each sum in their order).
struct Params {
    k: u32, kw: u32, kw16: u32, eps: f32, lanes: u32, hq: u32, hkv: u32, d: u32,
    rot: u32, style: u32, log2_theta: f32, splits: u32, scale: f32, p0: u32, p1: u32, p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<u32>;
@group(0) @binding(4) var<storage, read> wscale: array<f32>;
@group(0) @binding(5) var<storage, read> inp: array<u32>;  // token, position, length
#ifdef F16
@group(0) @binding(6) var<storage, read_write> kc: array<u32>;
@group(0) @binding(7) var<storage, read_write> vc: array<u32>;
fn kval(i: u32) -> f32 { let v = unpack2x16float(kc[i / 2u]); return select(v.x, v.y, (i & 1u) == 1u); }
fn vval(i: u32) -> f32 { let v = unpack2x16float(vc[i / 2u]); return select(v.x, v.y, (i & 1u) == 1u); }
#else
@group(0) @binding(6) var<storage, read_write> kc: array<f32>;
@group(0) @binding(7) var<storage, read_write> vc: array<f32>;
fn kval(i: u32) -> f32 { return kc[i]; }
fn vval(i: u32) -> f32 { return vc[i]; }
#endif
@group(0) @binding(8) var<storage, read_write> scratch: array<f32>;

const MAX_SPLITS: u32 = 64u;
const SPLIT_WG: u32 = 64u;  // attn_split's workgroup: keys a tile, outputs an invocation / 4
const NEG: f32 = -3.0e38;
var<workgroup> hv: array<f32, 768>;  // q | k | v rows of this head (d <= 256)

fn value(t: u32, i: u32) -> f32 { return x[i]; }
fn rope_src(i: u32) -> f32 { return hv[i]; }
// partials of split j: max and sum after att, the rows after those
fn part_m(j: u32) -> f32 { return scratch[p.hq * p.d + j]; }
fn part_l(j: u32) -> f32 { return scratch[p.hq * p.d + p.hq * MAX_SPLITS + j]; }
fn part_acc(j: u32, i: u32) -> f32 { return scratch[p.hq * p.d + 2u * p.hq * MAX_SPLITS + j * p.d + i]; }

#include row_norm
#include int8_dot
#include layer_gemv
#include rope_math
#include attn_merge

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let grp = p.hq / p.hkv;
    let kvh = h / grp;
    let d = p.d;
    let xr = norm_quant_local(tid, p.k, p.kw, p.eps);
    // q rows of head h, k and v rows of head kvh
    let lane = tid % p.lanes;
    for (var i0 = 0u; i0 < 3u * d; i0 += WG / p.lanes) {
        let i = i0 + tid / p.lanes;
        let part = min(i / d, 2u);
        var head = h;
        if (part > 0u) { head = p.hq + (part - 1u) * p.hkv + kvh; }
        let r = head * d + i - part * d;
        let acc = row_dot(tid, r, i < 3u * d, p.kw16, lane, p.lanes);
        if (i < 3u * d && lane == 0u) { hv[i] = i2s_value(acc, r, xr); }
    }
    workgroupBarrier();
    // rope and the K/V store: a pair of elements an invocation (rope_store's)
    let pos = inp[1];
    let n = inp[2];
    let e = 2u * tid;
    let live = e < d;
    var q0 = 0.0; var q1 = 0.0; var k0 = 0.0; var k1 = 0.0; var v0 = 0.0; var v1 = 0.0;
    if (live) {
        q0 = rotated(0u, e, f32(pos), p.rot, p.style, p.log2_theta);
        q1 = rotated(0u, e + 1u, f32(pos), p.rot, p.style, p.log2_theta);
        k0 = rotated(d, e, f32(pos), p.rot, p.style, p.log2_theta);
        k1 = rotated(d, e + 1u, f32(pos), p.rot, p.style, p.log2_theta);
        v0 = hv[2u * d + e];
        v1 = hv[2u * d + e + 1u];
    }
    workgroupBarrier();
    if (live) {
        let at = (pos * p.hkv + kvh) * d + e;
        let writer = h % grp == 0u;
#ifdef F16
        let kw = pack2x16float(vec2<f32>(k0, k1));
        let vw = pack2x16float(vec2<f32>(v0, v1));
        if (writer) { kc[at / 2u] = kw; vc[at / 2u] = vw; }
        let kr = unpack2x16float(kw);  // the current key and value as the cache holds them
        let vr = unpack2x16float(vw);
        k0 = kr.x; k1 = kr.y; v0 = vr.x; v1 = vr.y;
#else
        if (writer) { kc[at] = k0; kc[at + 1u] = k1; vc[at] = v0; vc[at + 1u] = v1; }
#endif
        hv[e] = q0; hv[e + 1u] = q1;
        hv[d + e] = k0; hv[d + e + 1u] = k1;
        hv[2u * d + e] = v0; hv[2u * d + e + 1u] = v1;
    }
    workgroupBarrier();
    // attn_split's tiles: quarter sl of the workgroup runs split s0 + sl; red holds
    // each quarter's 64 scores, then weights
    let sl = tid / SPLIT_WG;
    let lt = tid % SPLIT_WG;
    let pr0 = sl * SPLIT_WG;
    let c = (n + p.splits - 1u) / p.splits;
    for (var s0 = 0u; s0 < p.splits; s0 += WG / SPLIT_WG) {
        let split = s0 + sl;
        let lo = split * c;
        let hi = select(0u, min(lo + c, n), split < p.splits);
        var m = NEG;
        var l = 0.0;
        var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        for (var off = 0u; off < c; off += SPLIT_WG) {
            let t0 = lo + off;
            let tile = t0 < hi;
            let s = t0 + lt;
            let key = tile && s < hi;
            var score = NEG;
            if (key) {
                let kb = (s * p.hkv + kvh) * d;
                var dotv = 0.0;
                if (s == pos) {
                    for (var i = 0u; i < d; i++) { dotv += hv[i] * hv[d + i]; }
                } else {
                    for (var i = 0u; i < d; i++) { dotv += hv[i] * kval(kb + i); }
                }
                score = dotv * p.scale;
            }
            red[tid] = score;
            workgroupBarrier();
            var count = 0u;
            var new_m = m;
            var corr = 1.0;
            if (tile) {
                count = min(SPLIT_WG, hi - t0);
                var tmax = NEG;
                for (var j = 0u; j < count; j++) { tmax = max(tmax, red[pr0 + j]); }
                new_m = max(m, tmax);
                corr = exp(m - new_m);
            }
            workgroupBarrier();
            red[tid] = select(0.0, exp(score - new_m), key);
            workgroupBarrier();
            if (tile) {
                var tsum = 0.0;
                for (var j = 0u; j < count; j++) { tsum += red[pr0 + j]; }
                l = l * corr + tsum;
                for (var r = 0u; r < 4u; r++) {
                    let i = lt + r * SPLIT_WG;
                    if (i < d) {
                        var a = acc[r] * corr;
                        for (var j = 0u; j < count; j++) {
                            let t = t0 + j;
                            var v = 0.0;
                            if (t == pos) { v = hv[2u * d + i]; } else { v = vval((t * p.hkv + kvh) * d + i); }
                            a += red[pr0 + j] * v;
                        }
                        acc[r] = a;
                    }
                }
                m = new_m;
            }
            workgroupBarrier();
        }
        if (split < p.splits) {
            let j = h * p.splits + split;
            let base = p.hq * d;
            if (lt == 0u) {
                scratch[base + j] = m;
                scratch[base + p.hq * MAX_SPLITS + j] = l;
            }
            for (var r = 0u; r < 4u; r++) {
                let i = lt + r * SPLIT_WG;
                if (i < d) { scratch[base + 2u * p.hq * MAX_SPLITS + j * d + i] = acc[r]; }
            }
        }
    }
    storageBarrier();  // this workgroup's partials, written above
    for (var i = tid; i < d; i += WG) { scratch[h * d + i] = merged(h * p.splits, p.splits, i); }
}
