// Merges the splits of attn_split for every head (one workgroup), then
// attn_sub_norm (rmsnorm over hq * d) and int8 quantization of that row: row
// p.row of xq, partials from p.part0 on (a batched step; one step: 0 and 0).
struct Params { hq: u32, d: u32, splits: u32, kw: u32, eps: f32, row: u32, part0: u32, p2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> part_m: array<f32>;
@group(0) @binding(2) var<storage, read> part_l: array<f32>;
@group(0) @binding(3) var<storage, read> part_acc: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> xq: array<u32>;
@group(0) @binding(6) var<storage, read_write> scale: array<f32>;
@group(0) @binding(7) var<storage, read_write> xsum: array<i32>;

#include row_quant

fn value(t: u32, e: u32) -> f32 {  // one row: t is p.row
    let h = e / p.d;
    let i = e % p.d;
    let first = p.part0 + h * p.splits;
    var mx = -3.0e38;
    for (var s = 0u; s < p.splits; s++) { mx = max(mx, part_m[first + s]); }
    var l = 0.0;
    var a = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let w = exp(part_m[first + s] - mx);
        l += w * part_l[first + s];
        a += w * part_acc[(first + s) * p.d + i];
    }
    return a / l;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    norm_quant_row(tid, p.row, p.hq * p.d, p.kw, p.eps);
}
