// Merges the splits of attn_split for every head (one workgroup), then
// attn_sub_norm (rmsnorm over hq * d) and int8 quantization of that row: row
// p.row of xq, partials from p.part0 on (a batched step; one step: 0 and 0).
struct Params { hq: u32, d: u32, splits: u32, kw: u32, eps: f32, row: u32, part0: u32, p2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> part_m_buf: array<f32>;
@group(0) @binding(2) var<storage, read> part_l_buf: array<f32>;
@group(0) @binding(3) var<storage, read> part_acc_buf: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> xq: array<u32>;
@group(0) @binding(6) var<storage, read_write> scale: array<f32>;
@group(0) @binding(7) var<storage, read_write> xsum: array<i32>;

#include row_norm
#include row_quant

#include attn_merge

fn part_m(j: u32) -> f32 { return part_m_buf[j]; }
fn part_l(j: u32) -> f32 { return part_l_buf[j]; }
fn part_acc(j: u32, i: u32) -> f32 { return part_acc_buf[j * p.d + i]; }

fn value(t: u32, e: u32) -> f32 {  // one row: t is p.row
    return merged(p.part0 + (e / p.d) * p.splits, p.splits, e % p.d);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    norm_quant_row(tid, p.row, p.hq * p.d, p.kw, p.eps);
}
