"""Decompositions of ATen ops that PyTorch's tables lack, written in ATen ops the lowering
table lowers; ``apply.decomposition_for`` consults them first. Each is traced into the IR by
``trace_decomposition`` like PyTorch's own."""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                    saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of w = v * (g / ||v||) (norm over every dim but `dim`; norms shaped like g),
    as ATen's weight-norm backward: grad_g = sum(grad_w * v) / norms and
    grad_v = (g / norms) * (grad_w - v * sum(grad_w * v) / norms^2), accumulated in float32
    for reduced-precision inputs."""
    dims = [d for d in range(saved_v.dim()) if d != dim % max(saved_v.dim(), 1)]
    acc = torch.promote_types(saved_v.dtype, torch.float32)
    gw, v = grad_w.to(acc), saved_v.to(acc)
    g, norms = saved_g.to(acc), saved_norms.to(acc)
    per_dim = (gw * v).sum(dims, keepdim=True) if dims else gw * v
    grad_v = (g / norms) * (gw - v * (per_dim / (norms * norms)))
    grad_g = per_dim / norms
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


def _shrink_backward(grad_out: torch.Tensor, x: torch.Tensor, lambd: float) -> torch.Tensor:
    """hardshrink's and softshrink's gradient: zero where |x| <= lambd (both kernels' shrunk
    band, edges included), grad_out elsewhere."""
    return torch.where((x >= -lambd) & (x <= lambd), torch.zeros_like(grad_out), grad_out)


def _cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None) -> torch.Tensor:
    """torch.cdist's direct path (torch.cdist takes the matmul path, _euclidean_dist, itself):
    the p-norm of every row difference, [..., P, R]; p = 0 counts differing elements."""
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:
        return (diff != 0).to(x1.dtype).sum(-1)
    if p == float("inf"):
        return diff.amax(-1) if diff.size(-1) else diff.sum(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.pow(p).sum(-1).pow(1.0 / p)


def _cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float,
                    dist: torch.Tensor) -> torch.Tensor:
    """d cdist / d x1: sum over x2's rows of grad * d|x1 - x2|_p / d x1 (zero where the
    distance, or for p < 1 the element difference, is zero)."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # [..., P, R, M]
    g, d = grad.unsqueeze(-1), dist.unsqueeze(-1)
    zero = torch.zeros_like(diff)
    if p == 0 or diff.numel() == 0:
        return torch.zeros_like(x1)
    if p == 1:
        per = g * diff.sign()
    elif p == float("inf"):
        per = g * diff.sign() * (diff.abs() == d).to(diff.dtype)
    elif p == 2:
        per = torch.where(d == 0, zero, g * diff / d)
    elif p < 2:
        per = torch.where((d == 0) | (diff == 0), zero, g * diff.sign() * diff.abs().pow(p - 1) / d.pow(p - 1))
    else:
        per = torch.where(d == 0, zero, g * diff * diff.abs().pow(p - 2) / d.pow(p - 1))
    return per.sum(-2)


EXTRA_DECOMPOSITIONS = {
    aten._cdist_forward.default: _cdist_forward,
    aten._cdist_backward.default: _cdist_backward,
    aten._weight_norm_interface_backward.default: _weight_norm_interface_backward,
    aten.hardshrink_backward.default: _shrink_backward,
    aten.softshrink_backward.default: _shrink_backward,
}


# -- CTC loss (speech models' CTC heads) ---------------------------------------------------------
# The forward (alpha) and backward (beta) recursions of Graves et al., as ATen's CPU kernel
# computes them, vectorized over the batch and unrolled over time: the lengths are ints (the
# IntList overloads; ctc_loss reads tensor lengths to the host first), so each step is a
# handful of [N, 2S+1] ops. Positions past a sample's own extended target and times past its
# input length are masked to -inf (ATen leaves them unwritten in log_alpha).

_NEG_INF = float("-inf")


def _ctc_labels(targets: torch.Tensor, target_lengths: list[int], blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(extended labels [N, 2S+1]: blank, t1, blank, t2, ..., blank; whether position s may be
    entered from s-2: a label other than blank that differs from the one two back)."""
    n, s_max = len(target_lengths), max(target_lengths, default=0)
    if targets.dim() == 2:
        padded = targets[:, :s_max].long()
    else:  # targets concatenated: each sample's slice, padded to s_max
        rows, offset = [], 0
        for length in target_lengths:
            row = targets.narrow(0, offset, length).long()
            rows.append(torch.constant_pad_nd(row, [0, s_max - length], blank))
            offset += length
        padded = torch.stack(rows) if rows else targets.new_zeros((0, s_max), dtype=torch.long)
    blanks = torch.full((n, s_max), blank, dtype=torch.long, device=targets.device)
    ext = torch.cat([torch.stack([blanks, padded], 2).reshape(n, 2 * s_max),
                     torch.full((n, 1), blank, dtype=torch.long, device=targets.device)], 1)
    two_back = torch.constant_pad_nd(ext, [2, 0], blank)[:, :-2]
    skip = (ext != blank) & (ext != two_back)
    skip[:, :2] = False
    return ext, skip


def _lengths(values: list[int], like: torch.Tensor) -> torch.Tensor:
    """An int64 [N] tensor of Python ints, built from ops the tracer lowers."""
    if not values:
        return torch.zeros((0,), dtype=torch.long, device=like.device)
    return torch.cat([torch.full((1,), v, dtype=torch.long, device=like.device) for v in values])


def _ctc_common(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int],
                target_lengths: list[int], blank: int):
    ext, skip = _ctc_labels(targets, target_lengths, blank)
    n, width = ext.shape
    t_max = log_probs.shape[0]
    # emissions[n, t, s] = log_probs[t, n, ext[n, s]]
    emissions = torch.gather(log_probs.permute(1, 0, 2), 2, ext.unsqueeze(1).expand(n, t_max, width))
    positions = torch.arange(width, device=log_probs.device).unsqueeze(0)
    valid = positions < (2 * _lengths(target_lengths, log_probs) + 1).unsqueeze(1)  # [N, 2S+1]
    return ext, skip, emissions, valid, _lengths(input_lengths, log_probs)


def _ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int], target_lengths: list[int],
              blank: int = 0, zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG001
    """(negative log likelihood [N], log_alpha [N, T, 2S+1])."""
    ext, skip, emissions, valid, t_len = _ctc_common(log_probs, targets, input_lengths, target_lengths, blank)
    n, t_max, width = emissions.shape
    neg_inf = torch.full((n, width), _NEG_INF, dtype=log_probs.dtype, device=log_probs.device)
    first = (torch.arange(width, device=log_probs.device) < 2).unsqueeze(0) & valid
    alpha = torch.where(first, emissions[:, 0], neg_inf)
    alphas = [alpha]
    for t in range(1, t_max):
        one_back = torch.constant_pad_nd(alpha, [1, 0], _NEG_INF)[:, :-1]
        two_back = torch.where(skip, torch.constant_pad_nd(alpha, [2, 0], _NEG_INF)[:, :-2], neg_inf)
        step = torch.logaddexp(torch.logaddexp(alpha, one_back), two_back) + emissions[:, t]
        alpha = torch.where(valid & (t < t_len).unsqueeze(1), step, neg_inf)
        alphas.append(alpha)
    log_alpha = torch.stack(alphas, 1) if t_max else emissions
    # The last time step of each sample, at its last two extended positions.
    last = torch.gather(log_alpha, 1, (t_len - 1).clamp(min=0).view(n, 1, 1).expand(n, 1, width)).squeeze(1)
    end = 2 * _lengths(target_lengths, log_probs)
    at_end = torch.gather(last, 1, end.unsqueeze(1)).squeeze(1)
    before_end = torch.gather(last, 1, (end - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    before_end = torch.where(end > 0, before_end, torch.full_like(before_end, _NEG_INF))
    nll = -torch.logaddexp(at_end, before_end)
    nll = torch.where(t_len > 0, nll, torch.where(end > 0, torch.full_like(nll, float("inf")), torch.zeros_like(nll)))
    # zero_infinity is applied by ctc_loss and the backward: _ctc_loss itself keeps inf, as ATen's
    return nll, log_alpha


def _ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: list[int],
                       target_lengths: list[int], neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor,
                       blank: int, zero_infinity: bool = False) -> torch.Tensor:
    """Gradient for log_probs [T, N, C]: exp(lp) - exp(log(sum over positions s labelled c of
    alpha * beta) + nll - lp), times the incoming gradient; zero past each input length."""
    ext, skip, emissions, valid, t_len = _ctc_common(log_probs, targets, input_lengths, target_lengths, blank)
    n, t_max, width = emissions.shape
    neg_inf = torch.full((n, width), _NEG_INF, dtype=log_probs.dtype, device=log_probs.device)
    positions = torch.arange(width, device=log_probs.device).unsqueeze(0)
    end = (2 * _lengths(target_lengths, log_probs)).unsqueeze(1)
    last_two = valid & ((positions == end) | (positions == end - 1))
    # skip_ahead[s]: position s+2 may be entered from s
    skip_ahead = torch.constant_pad_nd(skip, [0, 2], False)[:, 2:]
    beta = neg_inf
    betas = [neg_inf] * t_max
    for t in range(t_max - 1, -1, -1):
        one_ahead = torch.constant_pad_nd(beta, [0, 1], _NEG_INF)[:, 1:]
        two_ahead = torch.where(skip_ahead, torch.constant_pad_nd(beta, [0, 2], _NEG_INF)[:, 2:], neg_inf)
        step = torch.logaddexp(torch.logaddexp(beta, one_ahead), two_ahead) + emissions[:, t]
        is_last = (t_len - 1 == t).unsqueeze(1)
        before = (t < t_len - 1).unsqueeze(1)
        beta = torch.where(is_last & last_two, emissions[:, t], torch.where(before & valid, step, neg_inf))
        betas[t] = beta
    log_beta = torch.stack(betas, 1)
    nll = neg_log_likelihood.to(log_probs.dtype)
    impossible = nll == float("inf")  # no alignment fits: CPU's gradient is NaN (or 0, zero_infinity)
    # P[n, t, c] = sum over s with ext[n, s] == c of exp(alpha + beta + nll): a probability
    posterior = torch.exp(log_alpha + log_beta + torch.where(impossible, torch.zeros_like(nll), nll).view(n, 1, 1))
    per_class = torch.zeros(n, t_max, log_probs.shape[2], dtype=log_probs.dtype, device=log_probs.device)
    per_class = per_class.scatter_add(2, ext.unsqueeze(1).expand(n, t_max, width), posterior)
    lp = log_probs.permute(1, 0, 2)
    out = torch.exp(lp) - torch.exp(torch.log(per_class) - lp)
    live = (torch.arange(t_max, device=log_probs.device).unsqueeze(0) < t_len.unsqueeze(1)).unsqueeze(2)
    if zero_infinity:
        live = live & ~impossible.view(n, 1, 1)
    else:
        out = torch.where(impossible.view(n, 1, 1), torch.full_like(out, float("nan")), out)
    out = torch.where(live, out * grad.view(n, 1, 1), torch.zeros_like(out))
    return out.permute(1, 0, 2)


EXTRA_DECOMPOSITIONS[aten._ctc_loss.default] = _ctc_loss
EXTRA_DECOMPOSITIONS[aten._ctc_loss_backward.default] = _ctc_loss_backward
