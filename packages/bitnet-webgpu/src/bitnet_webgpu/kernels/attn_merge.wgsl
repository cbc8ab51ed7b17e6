// Included by the shaders that merge attention splits (#include attn_merge):
// element i of the attention output from the `splits` partials from `first` on
// (running max part_m(j), sum part_l(j), unnormalised row part_acc(j, i) of
// length d; accessors defined by the includer), in split order.
fn merged(first: u32, splits: u32, i: u32) -> f32 {
    var mx = -3.0e38;
    for (var s = 0u; s < splits; s++) { mx = max(mx, part_m(first + s)); }
    var l = 0.0;
    var a = 0.0;
    for (var s = 0u; s < splits; s++) {
        let w = exp(part_m(first + s) - mx);
        l += w * part_l(first + s);
        a += w * part_acc(first + s, i);
    }
    return a / l;
}
