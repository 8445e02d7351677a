"""`ckptlint profile`: measuring what each checkpoint frees and costs."""
