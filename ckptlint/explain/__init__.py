"""`ckptlint explain`: find checkpoint errors in a log and say what most likely caused them.

`errors.py` reads torch's error texts, `signatures.py` is the table of known signatures,
`scan.py` streams a log through both. No torch, no libcst.
"""
