"""Random elementwise programs through fused mode, against strict mode and CPU.

Each seed builds a short random program (elementwise arithmetic, compares and selects,
transcendentals, broadcasts of per-channel, per-row and scalar operands, in-place updates,
row reductions broadcast back, a final sum) over one of a few shapes chosen to reach the host
clusters' different paths: tiles holding one value of a broadcast operand, several tiles per
row, rows shorter than a vector, channels-last walks, a partial last tile. Fused mode must give
strict mode's bits (both modes run the same kernels; fusion only changes what is materialized),
and both must match CPU within float32 tolerances where the program has no reduction (a mean
subtracted from values that are nearly equal, then compared, can flip a select on a last-bit
difference of the mean's summation order, in CPU's result as in ours).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

import torch_tpu

# (shape, memory format): 64x64 planes in tiles of 1024 hold one per-channel value per tile;
# rows of 1000 span partial tiles; rows of 3 are shorter than a vector; the channels-last case
# walks the tensor in a permuted order.
SHAPES: list[tuple[tuple[int, ...], torch.memory_format]] = [
    ((3, 4, 64, 64), torch.contiguous_format),
    ((2, 6, 16, 16), torch.channels_last),
    ((7, 1000), torch.contiguous_format),
    ((33, 5, 3), torch.contiguous_format),
    ((4097,), torch.contiguous_format),
]

Program = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def _operand_shapes(shape: tuple[int, ...], rng: random.Random) -> dict[str, tuple[int, ...]]:
    """Full-shape inputs plus a broadcast one: one dim kept (per channel, per row), or a scalar."""
    keep = rng.randrange(len(shape))
    partial = tuple(n if d == keep else 1 for d, n in enumerate(shape))
    return {"x": shape, "y": shape, "b": partial, "s": ()}


def _random_program(rng: random.Random, rank: int, reductions: bool = True) -> tuple[Program, list[str], bool]:
    """A chain of 6-14 steps over the values x, y, b, s: the program, its steps, and whether it
    reduces (a mean; only if `reductions`)."""
    unary: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = [
        ("neg", torch.neg),
        ("abs", torch.abs),
        ("tanh", torch.tanh),
        ("sigmoid", torch.sigmoid),
        ("exp(clamp)", lambda t: t.clamp(-10, 10).exp()),
        ("sqrt(abs)", lambda t: t.abs().sqrt()),
        ("square", torch.square),
        ("relu", torch.relu),
        ("clamp", lambda t: t.clamp(-1.5, 2.0)),
        ("log1p(abs)", lambda t: t.abs().log1p()),
    ]
    binary: list[tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = [
        ("add", torch.add),
        ("sub", torch.sub),
        ("mul", torch.mul),
        ("div", lambda a, c: a / (c.abs() + 0.5)),
        ("maximum", torch.maximum),
        ("minimum", torch.minimum),
        ("where", lambda a, c: torch.where(a > c, a, c * 0.5)),
        ("add scalar", lambda a, c: a + 0.75),
        ("mul scalar", lambda a, c: a * -1.25),
    ]
    steps: list[tuple[str, Callable[[dict[str, torch.Tensor]], None]]] = []
    for _ in range(rng.randint(6, 14)):
        kind = rng.random()
        src = rng.choice(["x", "y"])
        other = rng.choice(["x", "y", "b", "s"])
        if kind < 0.35:
            name, f = rng.choice(unary)
            steps.append((f"{src} = {name}({src})", lambda v, f=f, src=src: v.__setitem__(src, f(v[src]))))
        elif kind < 0.8:
            name, g = rng.choice(binary)
            steps.append((f"{src} = {name}({src}, {other})",
                          lambda v, g=g, src=src, other=other: v.__setitem__(src, g(v[src], v[other]))))
        elif kind < 0.9 or not reductions:  # in place, through the same tensor the program keeps reading
            steps.append((f"{src}.mul_({other}).add_(0.5)",
                          lambda v, src=src, other=other: v[src].mul_(v[other]).add_(0.5)))
        else:  # a row reduction broadcast back (a norm's centering)
            dim = rng.randrange(rank)
            steps.append((f"{src} = {src} - {src}.mean({dim}, keepdim=True)",
                          lambda v, src=src, dim=dim: v.__setitem__(src, v[src] - v[src].mean(dim, keepdim=True))))

    def run(values: dict[str, torch.Tensor]) -> torch.Tensor:
        v = {k: t.clone() for k, t in values.items()}
        for _, step in steps:
            step(v)
        return v["x"] * 0.5 + v["y"]

    text = [t for t, _ in steps]
    return run, text, any(".mean(" in t for t in text)


@pytest.mark.parametrize("seed", range(100))
def test_random_program_fused_matches_strict_and_cpu(seed: int):
    rng = random.Random(seed)
    shape, fmt = SHAPES[seed % len(SHAPES)]
    # Channels-last programs do not reduce: a reduction's summation order follows the layout of
    # the value it reads, and a fused cluster may store an intermediate row-major where strict
    # mode keeps the operand's channels-last layout, so a mean may differ in its last bit
    # (found by this test; docs/notes/perf-random-programs-same-bits.md).
    program, text, reduces = _random_program(rng, len(shape), reductions=fmt == torch.contiguous_format)
    torch.manual_seed(seed)
    inputs = {k: torch.randn(s) for k, s in _operand_shapes(shape, rng).items()}
    for k in ("x", "y"):
        inputs[k] = inputs[k].contiguous(memory_format=fmt)

    def on_tpu(mode: str) -> tuple[torch.Tensor, torch.Tensor]:
        with torch_tpu.mode(mode):
            out = program({k: t.to("tpu") for k, t in inputs.items()})
            return out.cpu(), out.sum().cpu()

    where = f"seed {seed}, shape {shape} ({fmt}), program:\n  " + "\n  ".join(text)
    fused_out, fused_total = on_tpu("fused")
    strict_out, strict_total = on_tpu("strict")
    assert torch.equal(fused_out, strict_out), f"fused and strict differ: {where}"
    assert torch.equal(fused_total, strict_total), f"fused and strict totals differ: {where}"
    cpu_out = program(inputs)
    if not reduces:
        # Chains of up to 14 steps, with transcendentals 1 ulp from ATen's (SLEEF, Cephes'
        # tanh, a correctly rounded sqrt), amplify last-bit differences.
        torch.testing.assert_close(fused_out, cpu_out, rtol=1e-4, atol=1e-5, msg=lambda m: f"{m}\n{where}")
        # A float32 sum of n terms may be off by ~n * eps * sum(|terms|) in another order;
        # these sums (up to 49K terms, summed in blocks and lanes) stay far inside
        # 1e-5 * sum(|terms|).
        scale = cpu_out.abs().sum().item()
        assert abs(fused_total.item() - cpu_out.sum().item()) <= 1e-5 * scale + 1e-4, f"totals differ: {where}"
