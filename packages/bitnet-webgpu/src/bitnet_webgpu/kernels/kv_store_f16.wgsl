// float32 values x[0 .. n) into a float16 array (two halves per u32) from
// element `first` on: the provider's kv_store into a float16 KV cache. One
// invocation per u32 word touched; a half outside the range keeps its bits.
struct Params { first: u32, n: u32, p0: u32, p1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;

fn half_bits(e: u32, old: u32) -> u32 {
    if (e < p.first || e >= p.first + p.n) { return old; }
    return pack2x16float(vec2<f32>(x[e - p.first], 0.0)) & 0xffffu;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = p.first / 2u + gid.x + gid.y * nw.x * 64u;
    if (w * 2u >= p.first + p.n) { return; }
    let old = cache[w];
    let lo = half_bits(2u * w, old & 0xffffu);
    let hi = half_bits(2u * w + 1u, old >> 16u);
    cache[w] = lo | (hi << 16u);
}
