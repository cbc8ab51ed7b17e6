"""The ``bitnet convert --type`` values (kept light: the CLI imports it at start-up)."""

#: Where the ternary layer weights go; embeddings are f16 (f32 for ``f32``), norms f32.
CONVERT_TYPES = ("tq2_0", "tq1_0", "i2_s", "f16", "f32")
