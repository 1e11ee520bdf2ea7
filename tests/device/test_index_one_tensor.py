"""Advanced indexing with one index tensor (`x[idx]`, `x[:, idx]`): the values on tpu against
CPU in every mode, and out-of-range indices raising CPU's IndexError (vLLM's runner indexes
its hidden states so each step; the lowering takes index_select's graph, docs/vllm.md)."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

I = torch.tensor  # noqa: E741
_G = torch.Generator().manual_seed(0)
_X = torch.randn(5, 6, 7, generator=_G)

# (indexing as a function of x and the index tensor, index tensor)
CASES = {
    "rows": (lambda x, i: x[i], I([4, 0, -1, 2, 2, -5])),
    "rows of 2-d": (lambda x, i: x[:, 0][i], I([3, -2, 0])),
    "columns": (lambda x, i: x[:, i], I([5, -6, 1])),
    "last dim, 2-d index": (lambda x, i: x[..., i], I([[6, 0], [-1, 3]])),
    "int32 index": (lambda x, i: x[:, :, i], I([1, -7], dtype=torch.int32)),
    "empty index": (lambda x, i: x[:, i], I([], dtype=torch.int64)),
    "0-d index": (lambda x, i: x[i], I(-2)),
    "1-d self": (lambda x, i: x[1, 2][i], I([0, 6, -7])),
}


def _run(fn, x: torch.Tensor, i: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "compiled":
        return torch.compile(fn, backend="tpu", dynamic=False)(x, i).cpu()
    with torch_tpu.mode(mode):
        return fn(x, i).cpu()


@pytest.mark.filterwarnings("ignore:torch_tpu.compile. recompiling")  # one frame per dtype
@pytest.mark.parametrize("mode", ["debug", "strict", "fused", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_one_index_tensor_matches_cpu(mode: str, dtype: torch.dtype) -> None:
    x = (_X * 4).to(dtype) if dtype != torch.bool else _X > 0
    for name, (fn, i) in CASES.items():
        want = fn(x, i)
        got = _run(fn, x.to("tpu"), i.to("tpu"), mode)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, mode)
        assert torch.equal(got, want), (name, mode)


@pytest.mark.parametrize("mode", ["debug", "strict", "fused"])
def test_one_index_tensor_out_of_range_names_the_index(mode: str) -> None:
    x = _X.to("tpu")
    for bad, dim_size, fn in ((7, 5, lambda t, i: t[i]), (-6, 5, lambda t, i: t[i]),
                              (6, 6, lambda t, i: t[:, i]), (-13, 7, lambda t, i: t[:, :, i])):
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for a dimension with size {dim_size}"):
            with torch_tpu.mode(mode):
                fn(x, torch.tensor([0, bad], device="tpu")).cpu()
    # The device keeps working, and a zero-size dim refuses any index as CPU does.
    assert torch.equal(x[torch.tensor([-1], device="tpu")].cpu(), _X[[-1]])
    with pytest.raises(IndexError):
        torch.empty(0, 3, device="tpu")[torch.tensor([0], device="tpu")].cpu()
    with pytest.raises(IndexError):
        torch.empty(0, 3)[torch.tensor([0])]
