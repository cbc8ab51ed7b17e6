// A decode token's attention block in one dispatch: workgroup w (query heads
// h0 = w * heads .. h0 + heads - 1, all of kv head g = h0 / (hq / hkv))
// normalises x (hidden floats) in int8, computes the rows of its q heads and of
// k and v head g of W = q|k|v into hv, rotates q and k at the position inp[1],
// writes k and v into row pos of the caches [S, hkv, d] (the kv head's first
// workgroup does), attends over the cache in `splits` splits of ceil(n / splits)
// keys (n = inp[2]; four (head, split) pairs at a time, one in each quarter of
// the workgroup) and merges them into att, the first hq * d floats of `scratch`
// (the splits' partials follow). heads: 1 on GPUs (hq workgroups), the whole
// kv group on CPU adapters (the norm and the k, v rows made once). The current key and value are read
// from hv, never from the row being written. Bit for bit the chain rmsnorm_quant,
// matmul_i2s, rope_store, attn_split, attn_combine (each sum in their order).
struct Params {
    k: u32, kw: u32, kw16: u32, eps: f32, lanes: u32, hq: u32, hkv: u32, d: u32,
    rot: u32, style: u32, log2_theta: f32, splits: u32, scale: f32, heads: u32, p1: u32, p2: u32,
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
var<workgroup> hv: array<f32, 1024>;  // q heads | k | v rows ((heads + 2) d <= 1024)

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
    let nh = p.heads;
    let h0 = wg.x * nh;
    let grp = p.hq / p.hkv;
    let kvh = h0 / grp;
    let d = p.d;
    let kb0 = nh * d;  // k's row in hv, then v's
    let vb0 = kb0 + d;
    let xr = norm_quant_local(tid, p.k, p.kw, p.eps);
    // q rows of heads h0.., k and v rows of head kvh
    let lane = tid % p.lanes;
    let rows = (nh + 2u) * d;
    for (var i0 = 0u; i0 < rows; i0 += WG / p.lanes) {
        let i = i0 + tid / p.lanes;
        let part = min(i / d, nh + 1u);  // < nh: a q head; nh: k; nh + 1: v
        var head = h0 + part;
        if (part == nh) { head = p.hq + kvh; }
        if (part > nh) { head = p.hq + p.hkv + kvh; }
        let r = head * d + i - part * d;
        let acc = row_dot(tid, r, i < rows, p.kw16, lane, p.lanes);
        if (i < rows && lane == 0u) { hv[i] = i2s_value(acc, r, xr); }
    }
    workgroupBarrier();
    // rope and the K/V store: a pair of elements an invocation (rope_store's), the
    // q heads' pairs then k's (with v's pair beside it)
    let pos = inp[1];
    let n = inp[2];
    let pairs = (nh + 1u) * d / 2u;
    var a0 = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var a1 = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var v0 = 0.0;
    var v1 = 0.0;
    var c = 0u;
    for (var pr = tid; pr < pairs; pr += WG) {  // at most 4 a invocation: (nh + 1) d <= 1024
        let e = 2u * pr;
        a0[c] = rotated(e - e % d, e % d, f32(pos), p.rot, p.style, p.log2_theta);
        a1[c] = rotated(e - e % d, e % d + 1u, f32(pos), p.rot, p.style, p.log2_theta);
        if (e >= kb0) { v0 = hv[vb0 + e - kb0]; v1 = hv[vb0 + e - kb0 + 1u]; }
        c++;
    }
    workgroupBarrier();
    c = 0u;
    for (var pr = tid; pr < pairs; pr += WG) {
        let e = 2u * pr;
        var x0 = a0[c];
        var x1 = a1[c];
        c++;
        if (e >= kb0) {
            let ke = e - kb0;
            let at = (pos * p.hkv + kvh) * d + ke;
            let writer = h0 % grp == 0u;
#ifdef F16
            let kw = pack2x16float(vec2<f32>(x0, x1));
            let vw = pack2x16float(vec2<f32>(v0, v1));
            if (writer) { kc[at / 2u] = kw; vc[at / 2u] = vw; }
            let kr = unpack2x16float(kw);  // the current key and value as the cache holds them
            let vr = unpack2x16float(vw);
            x0 = kr.x; x1 = kr.y; v0 = vr.x; v1 = vr.y;
#else
            if (writer) { kc[at] = x0; kc[at + 1u] = x1; vc[at] = v0; vc[at + 1u] = v1; }
#endif
            hv[vb0 + ke] = v0; hv[vb0 + ke + 1u] = v1;
        }
        hv[e] = x0; hv[e + 1u] = x1;
    }
    workgroupBarrier();
    // attn_split's tiles: quarter sl of the workgroup runs (head, split) pair
    // j0 + sl; red holds each quarter's 64 scores, then weights
    let sl = tid / SPLIT_WG;
    let lt = tid % SPLIT_WG;
    let pr0 = sl * SPLIT_WG;
    let span = (n + p.splits - 1u) / p.splits;
    let npairs = nh * p.splits;
    for (var j0 = 0u; j0 < npairs; j0 += WG / SPLIT_WG) {
        let j = j0 + sl;
        let hd = j / p.splits;  // the head within this workgroup
        let split = j % p.splits;
        let qb = hd * d;
        let lo = split * span;
        let hi = select(0u, min(lo + span, n), j < npairs);
        var m = NEG;
        var l = 0.0;
        var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        for (var off = 0u; off < span; off += SPLIT_WG) {
            let t0 = lo + off;
            let tile = t0 < hi;
            let s = t0 + lt;
            let key = tile && s < hi;
            var score = NEG;
            if (key) {
                let kb = (s * p.hkv + kvh) * d;
                var dotv = 0.0;
                if (s == pos) {
                    for (var i = 0u; i < d; i++) { dotv += hv[qb + i] * hv[kb0 + i]; }
                } else {
                    for (var i = 0u; i < d; i++) { dotv += hv[qb + i] * kval(kb + i); }
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
                for (var jj = 0u; jj < count; jj++) { tmax = max(tmax, red[pr0 + jj]); }
                new_m = max(m, tmax);
                corr = exp(m - new_m);
            }
            workgroupBarrier();
            red[tid] = select(0.0, exp(score - new_m), key);
            workgroupBarrier();
            if (tile) {
                var tsum = 0.0;
                for (var jj = 0u; jj < count; jj++) { tsum += red[pr0 + jj]; }
                l = l * corr + tsum;
                for (var r = 0u; r < 4u; r++) {
                    let i = lt + r * SPLIT_WG;
                    if (i < d) {
                        var a = acc[r] * corr;
                        for (var jj = 0u; jj < count; jj++) {
                            let t = t0 + jj;
                            var v = 0.0;
                            if (t == pos) { v = hv[vb0 + i]; } else { v = vval((t * p.hkv + kvh) * d + i); }
                            a += red[pr0 + jj] * v;
                        }
                        acc[r] = a;
                    }
                }
                m = new_m;
            }
            workgroupBarrier();
        }
        if (j < npairs) {
            let part = (h0 + hd) * p.splits + split;
            let base = p.hq * d;
            if (lt == 0u) {
                scratch[base + part] = m;
                scratch[base + p.hq * MAX_SPLITS + part] = l;
            }
            for (var r = 0u; r < 4u; r++) {
                let i = lt + r * SPLIT_WG;
                if (i < d) { scratch[base + 2u * p.hq * MAX_SPLITS + part * d + i] = acc[r]; }
            }
        }
    }
    storageBarrier();  // this workgroup's partials, written above
    for (var e = tid; e < nh * d; e += WG) {
        let h = h0 + e / d;
        scratch[h * d + e % d] = merged(h * p.splits, p.splits, e % d);
    }
}
