// Included after row_norm by the fused norm+quantize shaders of the ten-launch
// layer (#include row_quant): the row written to the outputs xq, scale and xsum.

// Row t of n values value(t, i): rmsnorm with weights g, then absmax int8 codes
// packed four a word into xq (kw words a row), the row's scale and code sum.
fn norm_quant_row(tid: u32, t: u32, n: u32, kw: u32, eps: f32) {
    let inv = row_inv_rms(tid, t, n, eps);
    let sc = row_quant_scale(tid, t, n, inv);
    var acc = 0;
    for (var w = tid; w < kw; w += WG) {
        let q = quant_word(t, w, n, inv, sc);
        acc += q.sum;
        xq[t * kw + w] = q.word;
    }
    let total = reduce_isum(tid, acc);
    if (tid == 0u) {
        scale[t] = sc;
        xsum[t] = total;
    }
}
