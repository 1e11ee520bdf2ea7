"""Out-of-range indices raise on the PJRT runtime as they do on the host runtime and in PyTorch.

XLA clamps a gather's out-of-range index and drops a scatter's, so before index checks a bad
token id read a neighbouring row and training went on with wrong values. Programs now check
their indices on the device (stablehlo/index_checks.h) and the runtime raises IndexError (or
torch.gather's RuntimeError) naming the op; a failing program writes nothing: new results are
lost ("value was lost" when used), in-place targets keep their last good value, and the process
goes on. test_pjrt_cpu_plugin.py runs this file on XLA's CPU plugin (resident and staged).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

import torch_tpu
from torch_tpu import _C

pytestmark = pytest.mark.skipif(
    _C._pjrt_info() is None,
    reason="the PJRT runtime is not active (set TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN)",
)

MODES = ["strict", "fused", "debug"]


def checks() -> dict[str, int]:
    return dict(_C._pjrt_info()["index_checks"])


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.mode(request.param):
        torch_tpu.sync()
        yield request.param
    with contextlib.suppress(IndexError, RuntimeError):
        torch_tpu.sync()  # a test that ends with a failure pending


def raises_by_sync(error: type[Exception], fn, match: str = "out of bounds") -> object:
    """Runs fn, then synchronizes: the error surfaces at the call (debug mode, or a later call
    of strict mode) or at the synchronization; returns fn's result when fn itself returned."""
    with pytest.raises(error, match=match):
        out = fn()
        torch.tpu.synchronize()
        return out
    return None


def test_indexing_with_a_bad_index_raises(mode: str) -> None:
    x = torch.arange(4.0, device="tpu")
    before = checks()
    raises_by_sync(IndexError, lambda: x[torch.tensor([0, 9], device="tpu")])
    assert checks()["failures"] == before["failures"] + 1
    # The process goes on: good indices read the right values, negative ones wrap like torch's.
    got = x[torch.tensor([3, -1, 0], device="tpu")]
    assert got.cpu().tolist() == [3.0, 3.0, 0.0]


def test_a_bad_index_names_its_value_and_the_size(mode: str) -> None:
    table = torch.randn(5, 3, device="tpu")
    ids = torch.tensor([1, 7, 2], device="tpu")
    raises_by_sync(IndexError, lambda: table.index_select(0, ids).cpu(), match="index 7 is out of bounds.*size 5")
    raises_by_sync(IndexError, lambda: torch.nn.functional.embedding(ids, table).cpu())


def test_any_index_into_a_zero_size_dim_raises(mode: str) -> None:
    """A gather from an empty dim has nothing to read: XLA rejects the gather itself, so the
    program reads nothing and its index check reports the index, as CPU raises IndexError
    (this compiled into a RuntimeError from the plugin before)."""
    empty = torch.empty(0, 3, device="tpu")
    raises_by_sync(IndexError, lambda: empty[torch.tensor([0], device="tpu")].cpu(),
                   match="index 0 is out of bounds.*size 0")
    assert empty[torch.tensor([], dtype=torch.int64, device="tpu")].shape == (0, 3)  # no index: no error
    assert torch.equal(torch.ones(2, device="tpu")[torch.tensor([1], device="tpu")].cpu(), torch.ones(1))


def test_a_scatter_into_an_empty_tensor_checks_its_indices(mode: str) -> None:
    """A scatter whose result is empty computes nothing, but CPU still checks a 1-d target's
    indices (the emitter skipped the check with the computation)."""
    raises_by_sync(IndexError, lambda: torch.zeros(0, device="tpu").index_add(
        0, torch.tensor([0], device="tpu"), torch.ones(1, device="tpu")).cpu(), match="out of")
    out = torch.zeros(0, device="tpu").index_add(0, torch.tensor([], dtype=torch.int64, device="tpu"),
                                                 torch.ones(0, device="tpu"))
    assert out.cpu().shape == (0,)


def test_torch_gather_raises_runtime_error_like_cpu(mode: str) -> None:
    src = torch.randn(3, 4)
    index = torch.tensor([[0, 1], [4, 0], [2, 3]])
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.gather(src, 1, index)  # CPU's own error type
    raises_by_sync(RuntimeError, lambda: torch.gather(src.to("tpu"), 1, index.to("tpu")).cpu())


def test_a_failed_scatter_leaves_its_target(mode: str) -> None:
    x = torch.arange(6.0, device="tpu")
    torch.tpu.synchronize()
    raises_by_sync(IndexError, lambda: x.index_put_((torch.tensor([1, 6], device="tpu"),),
                                                     torch.tensor([-1.0, -2.0], device="tpu")))
    # Neither update happened (CPU raises before writing): not even the in-range one.
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    x.index_put_((torch.tensor([1, 5], device="tpu"),), torch.tensor([-1.0, -2.0], device="tpu"))
    assert x.cpu().tolist() == [0.0, -1.0, 2.0, 3.0, 4.0, -2.0]


def test_an_in_place_update_in_a_failing_program_keeps_its_target(mode: str) -> None:
    # One program reads a bad index and updates w in place from it (fused mode records both in
    # one graph): w keeps its last good value, the new result is lost.
    w = torch.ones(3, device="tpu")
    table = torch.arange(12.0, device="tpu").reshape(4, 3)
    torch.tpu.synchronize()
    row = None

    def step() -> None:
        nonlocal row
        row = table[torch.tensor([5], device="tpu")][0]
        w.add_(row)

    raises_by_sync(IndexError, step)
    assert w.cpu().tolist() == [1.0, 1.0, 1.0]
    if row is not None and mode != "debug":
        with pytest.raises(IndexError, match="value was lost"):
            row.cpu()


def test_a_bad_token_id_raises_and_loses_no_parameter(mode: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 16)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(ids: torch.Tensor) -> float:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        return loss.item()

    good = torch.randint(0, 16, (4, 6)).to("tpu")
    for _ in range(3):
        step(good)
    before = {k: v.cpu().clone() for k, v in model.state_dict().items()}
    bad = good.clone()
    bad[1, 2] = 40  # out of range for the 16-row embedding (XLA would read row 15)
    with pytest.raises(IndexError, match="out of bounds"):
        step(bad)
        torch.tpu.synchronize()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v.cpu(), before[k], rtol=0, atol=0, msg=k)
    losses = [step(good) for _ in range(10)]
    assert losses[-1] < losses[0]


def test_compiled_graph_raises_and_keeps_its_inputs() -> None:
    emb = torch.nn.Embedding(8, 4).to("tpu")
    weight = emb.weight.detach().cpu().clone()

    @torch.compile(backend="tpu")
    def f(ids: torch.Tensor) -> torch.Tensor:
        return emb(ids).sum(-1) * 2

    ids = torch.tensor([1, 2, 3], device="tpu")
    torch.testing.assert_close(f(ids).cpu(), (weight[[1, 2, 3]].sum(-1) * 2), rtol=1e-6, atol=1e-6)
    with pytest.raises(IndexError, match="out of bounds"):
        f(torch.tensor([1, 8, 3], device="tpu")).cpu()
    torch.testing.assert_close(emb.weight.detach().cpu(), weight, rtol=0, atol=0)
    torch.testing.assert_close(f(ids).cpu(), (weight[[1, 2, 3]].sum(-1) * 2), rtol=1e-6, atol=1e-6)


def test_indices_in_range_by_construction_are_not_checked() -> None:
    # Indices made inside a program from iotas, argmax and sort permutations need no check (and
    # no wait for the program): fused mode records the index and its use in one graph. Across
    # program boundaries (strict mode) an index is data, and checked.
    x = torch.randn(6, 5, device="tpu")
    torch.tpu.synchronize()
    before = checks()
    with torch_tpu.mode("fused"):
        values, order = x.sort(dim=1)
        picked = x.gather(1, x.argmax(dim=1, keepdim=True))
        torch.testing.assert_close(values.cpu(), x.cpu().sort(dim=1).values)
        torch.testing.assert_close(order.cpu(), x.cpu().sort(dim=1).indices)
        torch.testing.assert_close(picked.cpu(), x.cpu().max(dim=1, keepdim=True).values)
    assert checks()["checked_runs"] == before["checked_runs"]
    # An index from the user is checked.
    with torch_tpu.mode("fused"):
        torch.testing.assert_close(x[torch.tensor([0, 5], device="tpu")].cpu(), x.cpu()[[0, 5]])
    assert checks()["checked_runs"] > before["checked_runs"]
