// Included by the rope shaders (#include rope_math): element e of the row that
// starts at `base` of rope_src (defined by the includer), rotated for position
// pos (style 0 neox, 1 norm; elements past rot copied).
fn rotated(base: u32, e: u32, pos: f32, rot: u32, style: u32, log2_theta: f32) -> f32 {
    if (e >= rot) { return rope_src(base + e); }
    let half = rot / 2u;
    var i: u32; var a_idx: u32; var b_idx: u32; var first: bool;
    if (style == 0u) {
        i = e % half; a_idx = i; b_idx = i + half; first = e < half;
    } else {
        i = e / 2u; a_idx = 2u * i; b_idx = 2u * i + 1u; first = (e % 2u) == 0u;
    }
    let ang = pos * exp2(-log2_theta * f32(2u * i) / f32(rot));
    let c = cos(ang);
    let s = sin(ang);
    let a = rope_src(base + a_idx);
    let b = rope_src(base + b_idx);
    if (first) { return a * c - b * s; }
    return b * c + a * s;
}
