// One matmul of a decode token's layer with its input's norm in the prologue:
// every workgroup normalises xin (k floats) with g in int8 (layer_gemv), then
// 256 / lanes output rows, each dotted by `lanes` invocations.
//   default: y[r] += W[r] . x          (o and down, the residual add)
//   ACT:     y[r] = act(W[r] . x) * W[n + r] . x   (gate|up; act 0 silu, 1 relu^2)
struct Params { n: u32, k: u32, kw: u32, kw16: u32, eps: f32, lanes: u32, act: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xin: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<u32>;
@group(0) @binding(4) var<storage, read> wscale: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

fn value(t: u32, i: u32) -> f32 { return xin[i]; }

#include row_norm
#include int8_dot
#include layer_gemv

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let x = norm_quant_local(tid, p.k, p.kw, p.eps);
    let lane = tid % p.lanes;
    let r = wg.x * (WG / p.lanes) + tid / p.lanes;
    let live = r < p.n;
#ifdef ACT
    let ag = row_dot(tid, r, live, p.kw16, lane, p.lanes);
    let au = row_dot(tid, p.n + r, live, p.kw16, lane, p.lanes);
    if (live && lane == 0u) {
        let a = i2s_value(ag, r, x);
        let b = i2s_value(au, p.n + r, x);
        if (p.act == 0u) {
            y[r] = a / (1.0 + exp(-a)) * b;
        } else {
            let q = max(a, 0.0);
            y[r] = q * q * b;
        }
    }
#else
    let acc = row_dot(tid, r, live, p.kw16, lane, p.lanes);
    if (live && lane == 0u) { y[r] += i2s_value(acc, r, x); }
#endif
}
