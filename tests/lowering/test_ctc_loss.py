"""CTC loss on tpu (torch_tpu/lowering/decompositions.py: _ctc_loss and _ctc_loss_backward),
losses and log_probs gradients against CPU: padded and concatenated targets, every
reduction, repeated labels, impossible alignments (with and without zero_infinity), empty
targets, another blank index, float64 and unbatched input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _check(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
           target_lengths: torch.Tensor, **kwargs) -> None:
    cpu, tpu = log_probs.clone().requires_grad_(), log_probs.to("tpu").requires_grad_()
    want = F.ctc_loss(cpu, targets, input_lengths, target_lengths, **kwargs)
    got = F.ctc_loss(tpu, targets.to("tpu"), input_lengths.to("tpu"), target_lengths.to("tpu"), **kwargs)
    torch.testing.assert_close(got.cpu(), want)
    weights = torch.randn(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(2))
    (want * weights).sum().backward()
    (got * weights.to("tpu")).sum().backward()
    # NaN where CPU's is: an impossible alignment without zero_infinity
    torch.testing.assert_close(tpu.grad.cpu(), cpu.grad, equal_nan=True)


def _log_probs(t: int, n: int, c: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(t, n, c, dtype=dtype, generator=torch.Generator().manual_seed(0)).log_softmax(2)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_matches_cpu(reduction: str, concatenated: bool) -> None:
    target_lengths = torch.tensor([4, 2, 3])
    targets = torch.randint(1, 6, (3, 4), generator=torch.Generator().manual_seed(1))
    if concatenated:
        targets = torch.cat([targets[i, :n] for i, n in enumerate(target_lengths.tolist())])
    _check(_log_probs(12, 3, 6), targets, torch.tensor([12, 10, 7]), target_lengths, reduction=reduction)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_repeats_impossible_alignments_and_empty_targets(zero_infinity: bool) -> None:
    # [3, 3, 3] needs 5 frames (blanks between repeats) and gets 4: the loss is inf.
    targets = torch.tensor([[1, 1, 2], [3, 3, 3], [2, 0, 0]])
    _check(_log_probs(6, 3, 5), targets, torch.tensor([6, 4, 5]), torch.tensor([3, 3, 0]), reduction="none",
           zero_infinity=zero_infinity)


def test_other_blank_float64_and_unbatched() -> None:
    _check(_log_probs(7, 2, 5, torch.float64), torch.tensor([[0, 1, 2], [1, 0, 0]]), torch.tensor([7, 5]),
           torch.tensor([3, 1]), blank=4, reduction="none")
    _check(_log_probs(5, 1, 4)[:, 0], torch.tensor([1, 2]), torch.tensor(5), torch.tensor(2))
