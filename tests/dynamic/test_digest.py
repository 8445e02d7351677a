"""The one tensor digest of dynamic mode and profile (in this process: real torch, CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ckptlint.dynamic.watch.compare import same_digest  # noqa: E402
from ckptlint.dynamic.watch.digest import WEIGHTS, digest, resolve  # noqa: E402

SAMPLE = 1 << 16   # what profile reads per saved tensor


def same(a, b, limit=None) -> bool:
    return same_digest(digest(a, limit), digest(b, limit))


def test_a_permutation_keeps_the_sum_and_changes_the_digest():
    """`x[randperm]` with a new random stream in the replay: same values, other order."""
    x = torch.arange(64, dtype=torch.float32)
    shuffled = x[torch.randperm(64, generator=torch.Generator().manual_seed(1))]
    assert digest(x)[0] == digest(shuffled)[0]
    assert not same(x, shuffled)
    index = torch.randperm(64, generator=torch.Generator().manual_seed(2))
    assert not same(index, torch.randperm(64, generator=torch.Generator().manual_seed(3)))


def test_any_single_bit_counts_and_equal_values_agree():
    x = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    assert same(x, x.clone())
    last_bit = x.clone()
    last_bit[500] = torch.nextafter(last_bit[500], torch.tensor(2.0, dtype=torch.float64))
    assert digest(x)[0] == pytest.approx(digest(last_bit)[0]) and not same(x, last_bit)
    flipped = x.clone()
    flipped[[10, 20]] = -flipped[[10, 20]]
    assert not same(x, flipped)
    assert not same(torch.zeros(3), torch.tensor([0.0, -0.0, 0.0]))


def test_layout_does_not_change_the_digest():
    t = torch.randn(37, 53, generator=torch.Generator().manual_seed(0))
    assert same(t.t(), t.t().contiguous())
    big = torch.randn(300, 500, generator=torch.Generator().manual_seed(0))
    assert same(big.t(), big.t().contiguous(), limit=SAMPLE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.complex64, torch.int8, torch.int64, torch.bool])
def test_every_dtype_is_digested_and_a_changed_value_seen(dtype):
    t = torch.ones(10, dtype=dtype)
    changed = t.clone()
    changed[3] = 0
    assert digest(t) is not None
    assert not same(t, changed)


def test_positions_far_apart_do_not_share_a_weight():
    """Longer reads are folded in rows of WEIGHTS words; two values trading places at one
    row's distance, or across the diagonal of the fold, still change the digest."""
    n = WEIGHTS * 20 + 7
    x = torch.arange(n, dtype=torch.int32)
    for i, j in ((3, 3 + WEIGHTS), (5 * WEIGHTS + 2, 2 * WEIGHTS + 5), (1, n - 1)):
        swapped = x.clone()
        swapped[[i, j]] = swapped[[j, i]]
        assert not same(x, swapped), (i, j)


def test_a_limit_bounds_what_is_read():
    """Profile reads at most SAMPLE values at a prime stride: a change where it reads is seen,
    one between the values it reads is not (dynamic mode reads everything)."""
    n = 4 * SAMPLE + 1000
    x = torch.zeros(n)
    read = x.clone()
    read[0] = 1.0
    between = x.clone()
    between[1] = 1.0
    assert not same(x, read, limit=SAMPLE)
    assert same(x, between, limit=SAMPLE)
    assert not same(x, between)


def test_lazy_digest_resolves_to_the_same_value():
    t = torch.randn(100, generator=torch.Generator().manual_seed(0))
    assert resolve(digest(t, lazy=True)) == digest(t)


def test_digesting_draws_no_random_numbers_and_no_mode_sees_it():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    state = torch.get_rng_state()
    t = torch.ones(WEIGHTS * 3)
    strided = t[::3]
    with Spy():
        digest(t)
        digest(strided, limit=SAMPLE)
    assert seen == [] and torch.equal(torch.get_rng_state(), state)


def test_unreadable_tensors_have_no_digest():
    assert digest(torch.empty(3, device="meta")) is None
    assert digest(torch.ones(2).to_sparse()) is None
    assert digest("not a tensor") is None
