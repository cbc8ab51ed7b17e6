// Decode step, one token: rotate q and k of the fused qkv row
// [(hq + 2 hkv) * d] (style 0 neox, 1 norm; dims past rot copied), write q to
// `q` and k, v into the caches [S, hkv, d] at the position inp[p.at]. In a
// batched step the token is row p.row of qkv and q (one step: row 0, at 1). One
// invocation per pair of elements (d is even), so an F16 cache (two halves
// per u32) is written a word at a time.
struct Params { hq: u32, hkv: u32, d: u32, rot: u32, style: u32, log2_theta: f32, row: u32, at: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<u32>;  // position at p.at
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
#ifdef F16
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
#else
@group(0) @binding(4) var<storage, read_write> kc: array<f32>;
@group(0) @binding(5) var<storage, read_write> vc: array<f32>;
#endif

fn rope_src(i: u32) -> f32 { return qkv[i]; }

#include rope_math

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let pairs = p.d / 2u;
    let idx = gid.x;
    let rows = p.hq + 2u * p.hkv;
    if (idx >= rows * pairs) { return; }
    let r = idx / pairs;
    let e = 2u * (idx % pairs);
    let base = (p.row * rows + r) * p.d;
    let pos = inp[p.at];
    var v0: f32; var v1: f32;
    if (r < p.hq + p.hkv) {
        v0 = rotated(base, e, f32(pos), p.rot, p.style, p.log2_theta);
        v1 = rotated(base, e + 1u, f32(pos), p.rot, p.style, p.log2_theta);
    } else {
        v0 = qkv[base + e];
        v1 = qkv[base + e + 1u];
    }
    if (r < p.hq) {
        let qo = (p.row * p.hq + r) * p.d + e;
        q[qo] = v0;
        q[qo + 1u] = v1;
        return;
    }
    let is_k = r < p.hq + p.hkv;
    let h = select(r - p.hq - p.hkv, r - p.hq, is_k);
    let at = (pos * p.hkv + h) * p.d + e;
#ifdef F16
    let word = pack2x16float(vec2<f32>(v0, v1));
    if (is_k) { kc[at / 2u] = word; } else { vc[at / 2u] = word; }
#else
    if (is_k) { kc[at] = v0; kc[at + 1u] = v1; } else { vc[at] = v0; vc[at + 1u] = v1; }
#endif
}
