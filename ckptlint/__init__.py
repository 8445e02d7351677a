"""ckptlint: a linter that keeps PyTorch activation checkpointing safe."""

__version__ = "0.1.0"
