// One matmul of a decode token's layer with its input's norm in the prologue:
// every workgroup normalises xin (k floats) with g in int8 (layer_gemv), then
// 256 / lanes weight rows, each dotted by `lanes` invocations.
//   default: y[r] += W[r] . x          (o and down, the residual add)
//   ACT:     y[r] = act(W[r] . x) * W[n + r] . x   (gate|up, 128 / lanes outputs a
//            workgroup; act 0 silu, 1 relu^2)
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
    let slots = WG / p.lanes;  // rows a workgroup dots
    let slot = tid / p.lanes;
#ifdef ACT
    // the first half of the slots dot gate rows, the second the up rows of the
    // same outputs (one row an invocation: two a loop ran ten times slower on
    // lavapipe); the up values meet their gates through red
    let half = slots / 2u;
    let up = slot >= half;
    let out = wg.x * half + slot - select(0u, half, up);
    let live = out < p.n;
    let r = out + select(0u, p.n, up);
    let acc = row_dot(tid, r, live, p.kw16, lane, p.lanes);
    if (up && live && lane == 0u) { red[slot - half] = i2s_value(acc, r, x); }
    workgroupBarrier();
    if (!up && live && lane == 0u) {
        let a = i2s_value(acc, r, x);
        let b = red[slot];
        if (p.act == 0u) {
            y[out] = a / (1.0 + exp(-a)) * b;
        } else {
            let q = max(a, 0.0);
            y[out] = q * q * b;
        }
    }
#else
    let r = wg.x * slots + slot;
    let live = r < p.n;
    let acc = row_dot(tid, r, live, p.kw16, lane, p.lanes);
    if (live && lane == 0u) { y[r] += i2s_value(acc, r, x); }
#endif
}
