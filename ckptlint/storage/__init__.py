"""Files on disk written atomically and plain data read defensively."""
