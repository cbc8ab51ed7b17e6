// Included by every shader that normalises a row (#include row_norm): one
// workgroup of 256 owns one row; invocation tid owns elements tid, tid + 256, ...
// and int8 words tid, tid + 256, ... (elements 4w .. 4w+3). The includer defines
// value(t, i) (element i of row t, computed from its inputs) and the norm weights
// g. The sums run in one order wherever this is included: a row norm of the ten
// launches and of the four (rmsnorm_quant, layer_gemv) agree bit for bit.
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

// 1 / rms of row t's n values (eps added to the mean square).
fn row_inv_rms(tid: u32, t: u32, n: u32, eps: f32) -> f32 {
    var ss = 0.0;
    for (var i = tid; i < n; i += WG) { let v = value(t, i); ss += v * v; }
    return inverseSqrt(reduce_sum(tid, ss) / f32(n) + eps);
}

// The absmax int8 scale of row t normalised by inv and weighted by g.
fn row_quant_scale(tid: u32, t: u32, n: u32, inv: f32) -> f32 {
    var m = 0.0;
    for (var i = tid; i < n; i += WG) { m = max(m, abs(value(t, i) * inv * g[i])); }
    return 127.0 / max(reduce_max(tid, m), 1e-5);
}

struct QWord { word: u32, sum: i32 }

// Int8 word w of row t (four codes, zeros past n) and the sum of its codes.
fn quant_word(t: u32, w: u32, n: u32, inv: f32, sc: f32) -> QWord {
    var word = 0u;
    var sum = 0;
    for (var b = 0u; b < 4u; b++) {
        let i = w * 4u + b;
        if (i < n) {
            let q = q8(value(t, i) * inv * g[i], sc);
            sum += q;
            word |= (u32(q) & 0xffu) << (8u * b);
        }
    }
    return QWord(word, sum);
}
