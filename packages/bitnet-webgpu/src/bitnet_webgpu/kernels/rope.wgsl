// Rotary position embedding on x [T, H, D]. style 0 = neox (pairs i, i+half),
// style 1 = norm (pairs 2i, 2i+1). Dimensions past rot_dim are copied.
struct Params { t: u32, h: u32, d: u32, rot: u32, style: u32, log2_theta: f32, p0: u32, p1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = p.rot / 2u;
    let per_row = p.d;  // one thread per element of a head row
    let idx = gid.x;
    if (idx >= p.t * p.h * per_row) { return; }
    let e = idx % per_row;
    let row = idx / per_row;          // t * h + head
    let t = row / p.h;
    let base = row * p.d;
    if (e >= p.rot) { y[base + e] = x[base + e]; return; }
    var i: u32; var a_idx: u32; var b_idx: u32; var first: bool;
    if (p.style == 0u) {
        i = e % half; a_idx = i; b_idx = i + half; first = e < half;
    } else {
        i = e / 2u; a_idx = 2u * i; b_idx = 2u * i + 1u; first = (e % 2u) == 0u;
    }
    let freq = exp2(-p.log2_theta * f32(2u * i) / f32(p.rot));
    let ang = f32(pos[t]) * freq;
    let c = cos(ang);
    let s = sin(ang);
    let a = x[base + a_idx];
    let b = x[base + b_idx];
    if (first) { y[base + e] = a * c - b * s; } else { y[base + e] = b * c + a * s; }
}
