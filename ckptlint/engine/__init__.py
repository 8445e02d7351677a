"""Whole runs: discovery, the per-file pipeline, worker processes, the cache, suppressions."""
