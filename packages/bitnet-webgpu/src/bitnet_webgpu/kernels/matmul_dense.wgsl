// y[t, n] = sum_k x[t, k] * table[n, k] for an f32 or f16 (u32-paired) table.
// One workgroup per output row n (x + z * gx) and tile of TT tokens.
// `table` holds rows [row0, row0 + n) of a table of n_total rows (bound a range at a time
// when larger than one binding); y is [t, n_total].
struct Params { n: u32, k: u32, t: u32, kw: u32, f16_table: u32, gx: u32, row0: u32, n_total: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = 64u;
const TT: u32 = 4u;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
#ifdef ROWS
    // CPU-like devices (lavapipe): one invocation per output row, no barriers.
    let n = (wg.x + wg.z * p.gx) * WG + tid;
    if (n >= p.n) { return; }
    let row = n * p.kw;
    for (var t = 0u; t < p.t; t++) {
        var acc = 0.0;
        if (p.f16_table == 1u) {
            for (var wi = 0u; wi < p.kw; wi++) {
                let pair = unpack2x16float(table[row + wi]);
                let k0 = 2u * wi;
                acc += pair.x * x[t * p.k + k0];
                if (k0 + 1u < p.k) { acc += pair.y * x[t * p.k + k0 + 1u]; }
            }
        } else {
            for (var k = 0u; k < p.k; k++) { acc += bitcast<f32>(table[row + k]) * x[t * p.k + k]; }
        }
        y[t * p.n_total + p.row0 + n] = acc;
    }
#else
    let n = wg.x + wg.z * p.gx;
    if (n >= p.n) { return; }
    let t0 = wg.y * TT;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    let row = n * p.kw;
    if (p.f16_table == 1u) {
        for (var wi = tid; wi < p.kw; wi += WG) {
            let pair = unpack2x16float(table[row + wi]);
            let k0 = 2u * wi;
            for (var tt = 0u; tt < TT; tt++) {
                let t = t0 + tt;
                if (t < p.t) {
                    var v = pair.x * x[t * p.k + k0];
                    if (k0 + 1u < p.k) { v += pair.y * x[t * p.k + k0 + 1u]; }
                    acc[tt] += v;
                }
            }
        }
    } else {
        for (var k = tid; k < p.k; k += WG) {
            let wv = bitcast<f32>(table[row + k]);
            for (var tt = 0u; tt < TT; tt++) {
                let t = t0 + tt;
                if (t < p.t) { acc[tt] += wv * x[t * p.k + k]; }
            }
        }
    }
    for (var tt = 0u; tt < TT; tt++) { red[tt * WG + tid] = acc[tt]; }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            for (var tt = 0u; tt < TT; tt++) { red[tt * WG + tid] += red[tt * WG + tid + s]; }
        }
        workgroupBarrier();
    }
    if (tid < TT) {
        let t = t0 + tid;
        if (t < p.t) { y[t * p.n_total + p.row0 + n] = red[tid * WG]; }
    }
#endif
}
