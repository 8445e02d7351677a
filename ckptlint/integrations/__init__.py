"""ckptlint inside other tools (the flake8 plugin)."""
