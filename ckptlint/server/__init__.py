"""`ckptlint server`: a language server (LSP over stdio) built on pygls (the `server` extra).

`analysis` lints one editor buffer (no pygls, no protocol); `isolated` runs it in a forked
process that a newer edit can kill; `protocol` speaks LSP.
"""
