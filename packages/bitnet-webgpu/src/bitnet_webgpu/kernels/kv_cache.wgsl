// Included by the attention shaders (#include kv_cache): the K and V caches at
// bindings 2 and 3, read by element through kval/vval. F16: two halves per u32.
#ifdef F16
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;
fn kval(i: u32) -> f32 { let w = unpack2x16float(kc[i / 2u]); return select(w.x, w.y, (i & 1u) == 1u); }
fn vval(i: u32) -> f32 { let w = unpack2x16float(vc[i / 2u]); return select(w.x, w.y, (i & 1u) == 1u); }
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
fn kval(i: u32) -> f32 { return kc[i]; }
fn vval(i: u32) -> f32 { return vc[i]; }
#endif
