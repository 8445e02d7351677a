"""Reading a file and parsing it: bytes to text, libcst trees, positions, the fast walker."""
