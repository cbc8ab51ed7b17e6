// rmsnorm(x, g) then per-row absmax int8 quantization, one workgroup per row:
// the same result as rmsnorm followed by quantize_act, without the float row
// in between. xq packs four int8 per u32 (rows padded to kw words).
struct Params { k: u32, kw: u32, eps: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> xq: array<u32>;
@group(0) @binding(4) var<storage, read_write> scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> xsum: array<i32>;

#include row_norm
#include row_quant

fn value(t: u32, i: u32) -> f32 {
    return x[t * p.k + i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    norm_quant_row(tid, wg.x, p.k, p.kw, p.eps);
}
