"""Wording that several rules share (see `ckptlint.messages` for how phrases are used)."""

# How a segment draws random numbers that torch saves and restores (`Draw.how`), for CKP301
# and CKP302 templates: `{draw:phrase}`.
TORCH_DRAW_PHRASES = {
    "call": "`{rng}`",
    "dropout_p": "`{rng}` with `dropout_p`",
    "module": "`{rng}`, built as `{built}`",
}
