// Elementwise ops on float32 arrays. op: 0 silu(a), 1 relu2(a), 2 silu(a)*b,
// 3 relu2(a)*b, 4 a+b, 5 a*b.
struct Params { n: u32, op: u32, p0: u32, p1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

fn silu(v: f32) -> f32 { return v / (1.0 + exp(-v)); }
fn relu2(v: f32) -> f32 { let r = max(v, 0.0); return r * r; }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 256u;
    if (i >= p.n) { return; }
    let v = a[i];
    switch p.op {
        case 0u: { y[i] = silu(v); }
        case 1u: { y[i] = relu2(v); }
        case 2u: { y[i] = silu(v) * b[i]; }
        case 3u: { y[i] = relu2(v) * b[i]; }
        case 4u: { y[i] = v + b[i]; }
        default: { y[i] = v * b[i]; }
    }
}
