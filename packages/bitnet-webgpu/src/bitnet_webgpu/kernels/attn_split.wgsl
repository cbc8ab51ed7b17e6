// Split-K (flash-decoding) attention of one query token over a cache [S, hkv, d]:
// workgroup (head h, split s) covers keys [s * c, min((s + 1) * c, n)) with
// n = inp[2] (the length after this token) and c = ceil(n / splits), in tiles
// of 64 keys with an online softmax, and writes its running max, sum and
// unnormalised output row; attn_combine_norm_quant merges the splits. d <= 256.
// In a batched step the query is row p.row of q, n = inp[p.at + 1] and the
// partials start at p.part0 (one step: row 0, at 1, part0 0).
struct Params { hq: u32, hkv: u32, d: u32, splits: u32, scale: f32, row: u32, at: u32, part0: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#include kv_cache
@group(0) @binding(4) var<storage, read> inp: array<u32>;  // position, length at p.at
@group(0) @binding(5) var<storage, read_write> part_m: array<f32>;
@group(0) @binding(6) var<storage, read_write> part_l: array<f32>;
@group(0) @binding(7) var<storage, read_write> part_acc: array<f32>;

const WG: u32 = 64u;
const NEG: f32 = -3.0e38;
var<workgroup> pr: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let split = wg.y;
    let kvh = h / (p.hq / p.hkv);
    let n = inp[p.at + 1u];
    let c = (n + p.splits - 1u) / p.splits;
    let lo = split * c;
    let hi = min(lo + c, n);
    let qb = (p.row * p.hq + h) * p.d;
    var m = NEG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var t0 = lo; t0 < hi; t0 += WG) {
        let s = t0 + tid;
        var score = NEG;
        if (s < hi) {
            let kb = (s * p.hkv + kvh) * p.d;
            var dotv = 0.0;
            for (var i = 0u; i < p.d; i++) { dotv += q[qb + i] * kval(kb + i); }
            score = dotv * p.scale;
        }
        pr[tid] = score;
        workgroupBarrier();
        var tmax = NEG;
        let count = min(WG, hi - t0);
        for (var j = 0u; j < count; j++) { tmax = max(tmax, pr[j]); }
        let new_m = max(m, tmax);
        let corr = exp(m - new_m);
        workgroupBarrier();
        pr[tid] = select(0.0, exp(score - new_m), s < hi);
        workgroupBarrier();
        var tsum = 0.0;
        for (var j = 0u; j < count; j++) { tsum += pr[j]; }
        l = l * corr + tsum;
        for (var r = 0u; r < 4u; r++) {
            let i = tid + r * WG;
            if (i < p.d) {
                var a = acc[r] * corr;
                for (var j = 0u; j < count; j++) { a += pr[j] * vval(((t0 + j) * p.hkv + kvh) * p.d + i); }
                acc[r] = a;
            }
        }
        m = new_m;
        workgroupBarrier();
    }
    let part = p.part0 + h * p.splits + split;
    if (tid == 0u) {
        part_m[part] = m;
        part_l[part] = l;
    }
    for (var r = 0u; r < 4u; r++) {
        let i = tid + r * WG;
        if (i < p.d) { part_acc[part * p.d + i] = acc[r]; }
    }
}
