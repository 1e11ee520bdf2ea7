"""Child of test_jax_runtime.py: a few programs of every mode on the runtime the environment
selects, compared with CPU. Prints one JSON object: the runtime's name, the JAX engine's
statistics, and the values of random ops (the parent compares them across runtimes: the emitted
Philox must draw exactly the host runtime's numbers)."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

import torch_tpu


def close(got: torch.Tensor, want: torch.Tensor, **tol) -> None:
    torch.testing.assert_close(got.cpu(), want, **tol)


def programs(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 8, generator=g), torch.randn(8, 5, generator=g)
    idx = torch.tensor([[0, 3], [5, 1], [2, 2], [7, 0], [4, 6], [1, 1]])
    with torch_tpu.mode(mode):
        tx, tw = x.to("tpu"), w.to("tpu")
        close(F.softmax(tx @ tw, dim=1), F.softmax(x @ w, dim=1))
        close((tx * 2 + 1).sin().sum(0), (x * 2 + 1).sin().sum(0))
        close(tx.gather(1, idx.to("tpu")), x.gather(1, idx))
        # A bf16 sum of 17 values: the two sides round partial sums in a different order, so one
        # bf16 ulp (2**-8 relative, up to ~1e-2 absolute at these magnitudes) may differ.
        close(tx.to(torch.bfloat16).sum(1), x.to(torch.bfloat16).sum(1), rtol=1.6e-2, atol=1e-2)
        close(torch.sort(tx, dim=1, stable=True)[1], torch.sort(x, dim=1, stable=True)[1])
        close(tx.max(), x.max())
        close((tx > 0).sum(), (x > 0).sum())
        # Writes through views into strided memory, and a dtype-converting out= destination.
        y, ty = x.clone(), tx.clone()
        y[:, ::2].mul_(3)
        ty[:, ::2].mul_(3)
        y.t()[1:3] += 1
        ty.t()[1:3] += 1
        close(ty, y)
        out, tout = torch.empty(6, 8, dtype=torch.float64), torch.empty(6, 8, dtype=torch.float64, device="tpu")
        torch.add(x, 1, out=out)
        torch.add(tx, 1, out=tout)
        close(tout, out)
        s = torch.zeros(3, device="tpu")  # an empty program input and a scalar argument
        close(s.new_empty(0).sum() + torch.tensor(0.5, device="tpu"), torch.tensor(0.5))


def random_values() -> list[float]:
    torch.tpu.manual_seed(7)
    u = torch.rand(5, device="tpu")
    n = torch.randn(5, device="tpu", dtype=torch.float64)
    d = F.dropout(torch.ones(8, device="tpu"), 0.5)
    return torch.cat([u.double(), n, d.double()]).cpu().tolist()


def compiled() -> None:
    def f(a, b):
        return torch.tanh(a @ b).mean(dim=0) * 3

    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 3, generator=g), torch.randn(3, 2, generator=g)
    cf = torch.compile(f, backend="tpu")
    close(cf(a.to("tpu"), b.to("tpu")), f(a, b))


def main() -> None:
    for mode in ("strict", "debug", "fused"):
        programs(mode)
    compiled()
    rnd = random_values()
    torch_tpu.sync()
    runtime = torch_tpu._C._runtime_name()
    stats = {}
    if runtime == "jax":
        from torch_tpu import jax_runtime

        stats = jax_runtime.stats()
    print(json.dumps({"runtime": runtime, "jax": stats, "random": rnd}))


if __name__ == "__main__":
    main()
