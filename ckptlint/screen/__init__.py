"""Cheap tests that keep files without a checkpoint site away from libcst."""
