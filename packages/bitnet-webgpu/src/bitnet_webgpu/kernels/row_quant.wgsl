// Included by the fused norm+quantize shaders (#include row_quant): one workgroup
// of 256 owns one row; invocation tid owns the int8 words tid, tid + 256, ...
// (elements 4w .. 4w+3), so every phase reads back only what it wrote itself.
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> redi: array<i32, 256>;

fn reduce_sum(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_max(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_isum(tid: u32, v: i32) -> i32 {
    redi[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { redi[tid] += redi[tid + s]; }
        workgroupBarrier();
    }
    return redi[0];
}

fn q8(v: f32, s: f32) -> i32 {
    return i32(clamp(round(v * s), -128.0, 127.0));
}
