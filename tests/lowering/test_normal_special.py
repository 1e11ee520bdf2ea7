"""Normal-distribution special functions on tpu: special.erfcx (and special.log_ndtr, whose
decomposition calls it) and special.ndtri, float64 against CPU over their whole range and
special values (the OpInfo samples are few and small)."""

from __future__ import annotations

import torch


def test_erfcx_matches_cpu_across_its_range() -> None:
    x = torch.cat([torch.linspace(-30, 30, 6001, dtype=torch.float64),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-300, 1e10, 1e300],
                                dtype=torch.float64)])
    want = torch.special.erfcx(x)
    got = torch.special.erfcx(x.to("tpu")).cpu()
    # Below x = 2, exp(x^2) (1 - erf(x)) loses up to two of sixteen digits (docstring of _erfcx).
    torch.testing.assert_close(got, want, rtol=2e-14, atol=0, equal_nan=True)


def test_log_ndtr_matches_cpu() -> None:
    x = torch.linspace(-40, 10, 2001, dtype=torch.float64)
    torch.testing.assert_close(torch.special.log_ndtr(x.to("tpu")).cpu(), torch.special.log_ndtr(x), rtol=1e-12,
                               atol=1e-12)


def test_ndtri_matches_cpu_into_the_tails() -> None:
    p = torch.cat([torch.linspace(0, 1, 4001, dtype=torch.float64), torch.logspace(-300, -1, 600, dtype=torch.float64),
                   1 - torch.logspace(-15, -1, 100, dtype=torch.float64),
                   torch.tensor([-0.1, 1.1, float("nan"), 0.5, 5e-324, 1e-310], dtype=torch.float64)])
    want = torch.special.ndtri(p)
    got = torch.special.ndtri(p.to("tpu")).cpu()
    # Newton on the erfcx form of the normal CDF: a few ulps, also where |z| is small. (XLA's
    # CPU plugin flushes the two denormal inputs to zero: -inf there on the pjrt runtime.)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15, equal_nan=True)
