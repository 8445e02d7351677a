"""Fix edits and writing fixed files."""
