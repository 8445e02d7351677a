"""The watched process's side of dynamic mode: hooks into torch and the recorder (imports torch)."""
