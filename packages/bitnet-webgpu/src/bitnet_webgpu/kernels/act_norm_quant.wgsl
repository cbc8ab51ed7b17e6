// act(gate) * up, rmsnorm with the ffn sub-norm, int8 quantization: one
// workgroup per row of gu = [gate | up] (2f floats). act 0 silu, 1 relu^2.
struct Params { f: u32, kw: u32, act: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gu: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<u32>;
@group(0) @binding(4) var<storage, read_write> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> xsum: array<i32>;

#include row_norm
#include row_quant

fn value(t: u32, i: u32) -> f32 {
    let base = t * 2u * p.f;
    let a = gu[base + i];
    let b = gu[base + p.f + i];
    if (p.act == 0u) { return a / (1.0 + exp(-a)) * b; }
    let r = max(a, 0.0);
    return r * r * b;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    norm_quant_row(tid, wg.x, p.f, p.kw, p.eps);
}
