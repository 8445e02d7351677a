"""The GPU check for dynamic mode (run on a CUDA machine; never part of the test suite).

    PYTHONPATH=. python tests/dynamic/gpu_check.py

Confirms on CUDA: CKP301 (a tensor moved to CUDA inside the segment, whose CUDA RNG the
checkpoint did not save because its inputs are on the CPU, then dropout) and CKP302
(dropout on CUDA under preserve_rng_state=False). For each it prints the ground truth
(gradients with and without checkpointing differ) and the verdict line; exits 1 unless both
are confirmed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dynhelp import run_dynamic  # noqa: E402


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 2
    ok = True
    for script, args, code in (("device_move.py", (), "CKP301"),
                               ("unpreserved_rng.py", ("cuda",), "CKP302")):
        result = run_dynamic(script, args)
        finding = result.one(code)
        truth = result.values["plain"] != result.values["ckpt"]
        print(f"{script} {' '.join(args)}: gradients differ with checkpointing: {truth}")
        print(f"  {code} [{finding['verdict']}] {finding['evidence']}")
        ok = ok and truth and finding["verdict"] == "confirmed"
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
