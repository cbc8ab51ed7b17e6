// Included after row_norm and int8_dot by the four-launch layer's shaders
// (#include layer_gemv): each workgroup normalises and quantises the whole input
// row itself into its own memory (xl), then dots its weight rows with it, so no
// dispatch waits on another's workgroups. The includer binds the ternary
// weights w (kw16 words a row, 16 codes a word) and their scales wscale.
const XL_WORDS: u32 = 2048u;  // int8 words of the largest input row (8192 values)
var<workgroup> xl: array<u32, 2048>;

struct LocalRow { scale: f32, sum: i32 }

// Row 0 of n values value(0, i) normalised with g and eps, in int8 into xl (kw
// words: as norm_quant_row writes xq); its scale and code sum, for every invocation.
fn norm_quant_local(tid: u32, n: u32, kw: u32, eps: f32) -> LocalRow {
    let inv = row_inv_rms(tid, 0u, n, eps);
    let sc = row_quant_scale(tid, 0u, n, inv);
    var acc = 0;
    for (var wi = tid; wi < kw; wi += WG) {
        let q = quant_word(0u, wi, n, inv, sc);
        acc += q.sum;
        xl[wi] = q.word;
    }
    let total = reduce_isum(tid, acc);  // its barriers publish xl
    workgroupBarrier();  // redi's readers are done before it is written again
    return LocalRow(sc, total);
}

// Word wi of weight row r (16 codes) dotted with xl's words 4 wi .. 4 wi + 3.
fn word_dot(r: u32, kw16: u32, wi: u32) -> i32 {
    let word = w[r * kw16 + wi];
    return dot4(xl[wi * 4u], word & 0x03030303u) + dot4(xl[wi * 4u + 1u], (word >> 2u) & 0x03030303u)
        + dot4(xl[wi * 4u + 2u], (word >> 4u) & 0x03030303u)
        + dot4(xl[wi * 4u + 3u], (word >> 6u) & 0x03030303u);
}

// The int dot product of weight row r with xl, `lanes` invocations a row (this
// one's `lane`, its sums met through redi): valid on lane 0. Every invocation
// calls it with the same lanes (live: the row exists). ROWS (CPU-like adapters):
// one invocation a row (lanes 1), its loop the same for every invocation.
fn row_dot(tid: u32, r: u32, live: bool, kw16: u32, lane: u32, lanes: u32) -> i32 {
    var acc = 0;
#ifdef ROWS
    let rr = select(0u, r, live);
    for (var wi = 0u; wi < kw16; wi++) { acc += word_dot(rr, kw16, wi); }
#else
    if (live) {
        for (var wi = lane; wi < kw16; wi += lanes) { acc += word_dot(r, kw16, wi); }
    }
    if (lanes > 1u) {
        redi[tid] = acc;
        workgroupBarrier();
        if (lane == 0u) {
            for (var i = 1u; i < lanes; i++) { acc += redi[tid + i]; }
        }
        workgroupBarrier();
    }
#endif
    return acc;
}

// Output row r of the ternary matmul from its int dot product (as matmul_i2s).
fn i2s_value(acc: i32, r: u32, x: LocalRow) -> f32 {
    return f32(acc - x.sum) * wscale[r] / x.scale;
}
