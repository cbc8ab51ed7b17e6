// Rows of a table by token id. F16 tables are stored as u32 pairs (unpack2x16float);
// kw = u32 words per table row. `table` holds rows [row0, row0 + rows) (a table larger
// than one binding is gathered a range at a time): ids outside it are left alone.
struct Params { t: u32, d: u32, kw: u32, f16_table: u32, row0: u32, rows: u32, p0: u32, p1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x;
    if (idx >= p.t * p.d) { return; }
    let t = idx / p.d;
    let e = idx % p.d;
    let id = u32(ids[t]);
    if (id < p.row0 || id >= p.row0 + p.rows) { return; }
    let row = (id - p.row0) * p.kw;
    if (p.f16_table == 1u) {
        let pair = unpack2x16float(table[row + e / 2u]);
        y[idx] = select(pair.x, pair.y, (e % 2u) == 1u);
    } else {
        y[idx] = bitcast<f32>(table[row + e]);
    }
}
