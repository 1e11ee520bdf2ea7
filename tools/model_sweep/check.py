"""Run one architecture (of any source, see sources.py) on CPU and on "tpu" (strict, fused) and compare.

For each target: build the model from its tiny config under a fixed seed, make synthetic inputs
for its head, run forward on CPU, then copy the same weights to "tpu" and run forward in each
mode and compare the outputs; then one training step (loss.backward + AdamW step) on CPU and
on "tpu", comparing the loss, the gradients and the updated parameters. The result names a
failure class:

- missing-op: NotImplementedError from the backend (the message names the ATen op)
- numerics:   ran, but values differ beyond the tolerance for the dtype
- ill-conditioned: values differ, but CPU float32 is as far from a float64 run (see
              CONDITIONING_SLACK): the tiny model amplifies rounding, not a device error
- crash:      any other exception on "tpu" (the CPU reference worked)
- slow:       the parent's timeout killed the worker (see sweep.py)
- setup:      the model or its CPU reference could not be built / run (not counted for the device)
"""

from __future__ import annotations

import copy
import re
import time
import traceback
from typing import Any

import torch

from .tiny_configs import Target, tiny_config

BATCH = 2
SEQ = 8
SEED = 0

# (rtol, atol) per dtype: float32 results of a different summation order or a different
# transcendental implementation agree to ~1e-5 relative; the tiny models' outputs are O(1).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-3, 1e-4),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float16: (5e-3, 5e-3),
}
LR = 1e-3
ADAM_EPS = 1e-6  # see tests/models/test_training.py: keeps rounding noise in zero gradients small


class SetupError(Exception):
    """The model or its CPU reference failed: not a device failure."""


def build(target: Target) -> torch.nn.Module:
    """The tiny model of `target`, initialized under seed 0."""
    if target.source == "diffusers":
        from . import diffusers_models
        torch.manual_seed(SEED)
        return diffusers_models.build(target.model_type)
    import transformers
    cls = getattr(transformers, target.class_name)
    config = tiny_config(target.model_type)
    torch.manual_seed(SEED)
    model = cls(config)
    return model


def make_inputs(target: Target, model: torch.nn.Module) -> dict[str, Any]:
    """Synthetic inputs (with labels, so the model computes its own loss) for the model's head."""
    if target.source == "diffusers":
        from . import diffusers_models
        return diffusers_models.make_inputs(target.model_type)
    g = torch.Generator().manual_seed(1)
    config = model.config
    name = getattr(model, "main_input_name", "input_ids")
    inputs: dict[str, Any] = {}
    text_cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text_cfg, "vocab_size", None) or 128
    high = min(vocab, 128)
    if name == "input_ids":
        ids = torch.randint(4, high, (BATCH, SEQ), generator=g)
        inputs["input_ids"] = ids
        inputs["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    elif name == "pixel_values":
        vcfg = getattr(config, "vision_config", None) or config
        size = getattr(vcfg, "image_size", 32)
        if isinstance(size, (list, tuple)):
            h, w = size[0], size[-1]
        elif isinstance(size, dict):
            h, w = size.get("height", 32), size.get("width", 32)
        else:
            h = w = int(size)
        c = getattr(vcfg, "num_channels", 3)
        inputs["pixel_values"] = torch.randn(BATCH, c, h, w, generator=g)
    elif name == "input_values":
        inputs["input_values"] = torch.randn(BATCH, 1600, generator=g)
    elif name == "input_features":
        if target.model_type in ("whisper",):
            frames = 2 * config.max_source_positions
            inputs["input_features"] = torch.randn(BATCH, config.num_mel_bins, frames, generator=g)
        else:
            feat = getattr(config, "input_feat_per_channel", None) or getattr(config, "num_mel_bins", 16)
            feat *= getattr(config, "input_channels", 1)
            inputs["input_features"] = torch.randn(BATCH, 64, feat, generator=g)
    else:
        raise SetupError(f"no synthetic input for main_input_name={name!r}")

    labels_vocab = high
    if target.head in ("causal-lm", "masked-lm"):
        inputs["labels"] = torch.randint(4, labels_vocab, (BATCH, SEQ), generator=g)
    elif target.head in ("seq2seq-lm", "speech-seq2seq"):
        inputs["labels"] = torch.randint(4, labels_vocab, (BATCH, SEQ), generator=g)
        if getattr(config, "decoder_start_token_id", None) is None:
            inputs["decoder_input_ids"] = torch.randint(4, labels_vocab, (BATCH, SEQ), generator=g)
    elif target.head == "ctc":
        inputs["labels"] = torch.randint(1, labels_vocab, (BATCH, 2), generator=g)
    else:
        inputs["labels"] = torch.randint(0, getattr(config, "num_labels", 2), (BATCH,), generator=g)
    return inputs


def to_device(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def outputs_of(out: Any) -> dict[str, torch.Tensor]:
    """The compared tensors of a model output: the loss and the head's main output."""
    res: dict[str, torch.Tensor] = {}
    items = out.items() if hasattr(out, "items") else enumerate(out if isinstance(out, tuple) else (out,))
    for k, v in items:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            res[str(k)] = v
    return res


def loss_of(out: Any, target: Target | None = None) -> torch.Tensor:
    """The model's own loss; for diffusers models the denoising MSE against a fixed target."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    first = next(iter(outputs_of(out).values()))
    if target is not None and target.source == "diffusers":
        from . import diffusers_models
        want = diffusers_models.loss_target(first).to(first.device)
        return torch.nn.functional.mse_loss(first.float(), want.float())
    return first.float().square().mean()


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float]:
    rtol, atol = TOLERANCES.get(a.dtype, (1e-3, 1e-4))
    a = a.detach().cpu().double()
    b = b.detach().cpu().double()
    if a.shape != b.shape:
        return False, float("inf")
    if a.numel() == 0:
        return True, 0.0
    scale = max(1.0, b.abs().max().item())  # outputs up to O(100) (logits): relative to the range
    err = (a - b).abs()
    ok = bool((err <= atol * scale + rtol * b.abs()).all()) and bool((a.isnan() == b.isnan()).all())
    return ok, err.nan_to_num(0.0).max().item()


_OP_RE = re.compile(r"'([\w.:]+)' is not implemented")


def classify(exc: BaseException) -> dict[str, Any]:
    msg = f"{type(exc).__name__}: {exc}"
    m = _OP_RE.search(str(exc))
    if isinstance(exc, NotImplementedError) and m:
        return {"class": "missing-op", "op": m.group(1), "error": msg[:400]}
    if m:  # a wrapped NotImplementedError (e.g. raised at a fused flush)
        return {"class": "missing-op", "op": m.group(1), "error": msg[:400]}
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(tb)), "")
    return {"class": "crash", "error": msg[:400], "where": where}


def _forward(model: torch.nn.Module, inputs: dict, device: str) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(**to_device(inputs, device))
    return {k: v.cpu() for k, v in outputs_of(out).items()}


def _train_step(model: torch.nn.Module, inputs: dict, device: str,
                target: Target | None = None) -> tuple[torch.Tensor, dict, dict]:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS, weight_decay=0.01)
    out = model(**to_device(inputs, device))
    loss = loss_of(out, target)
    loss.backward()
    grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    params = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    return loss.detach().cpu(), grads, params


def _compare(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor], what: str) -> dict[str, Any] | None:
    for k, r in ref.items():
        if k not in got:
            return {"class": "numerics", "error": f"{what} {k}: missing on tpu"}
        ok, err = _close(got[k], r)
        if not ok:
            return {"class": "numerics", "error": f"{what} {k}: max abs error {err:.3g}"}
    return None


# Updated parameters: AdamW's first step moves each weight by lr * g / (|g| + eps), i.e. by about
# lr * sign(g). Where a gradient is (mathematically) zero, e.g. a conv bias before batch norm,
# its rounding noise (~1e-9, different on every backend) still picks a sign, so the two devices
# may move such a weight in opposite directions: there the allowed difference is 2 * lr (the
# gradients themselves were compared first). Everywhere else the update must agree to 2% of lr.
PARAM_ATOL = 0.02 * LR
NEAR_ZERO_GRAD = 1e-6


def _compare_params(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor],
                    ref_grads: dict[str, torch.Tensor]) -> dict[str, Any] | None:
    for k, r in ref.items():
        if k not in got:
            return {"class": "numerics", "error": f"param {k}: missing on tpu"}
        err = (got[k].double() - r.double()).abs()
        g = ref_grads.get(k)
        allowed = torch.full_like(err, PARAM_ATOL) + 1e-6 * r.double().abs()
        if g is not None:
            allowed = torch.where(g.double().abs() <= NEAR_ZERO_GRAD * max(1.0, g.abs().max().item()),
                                  torch.full_like(err, 2.05 * LR), allowed)
        if not bool((err <= allowed).all()):
            return {"class": "numerics", "error": f"param {k}: max abs error {err.max().item():.3g}"}
    return None


# A tiny model's train step can be ill-conditioned: batch norm over 2 samples or over 1x1 maps
# divides by a near-zero batch variance, and float32 rounding (which differs between any two
# backends, CPU's own kernels included) is amplified into gradients that differ by percent.
# When the device misses CPU's float32 result, both are measured against a float64 CPU run of
# the same step: if on every compared tensor the device is at most CONDITIONING_SLACK times
# farther from float64 than CPU float32 is (or within the tolerance of float64), the cell is
# recorded as "ill-conditioned" (a harness limit, not a pass); otherwise it stays "numerics".
CONDITIONING_SLACK = 2.0


def _double(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _double(v) for k, v in x.items()}
    return x


def _flat_train(loss: torch.Tensor, grads: dict, params: dict) -> dict[str, torch.Tensor]:
    return {"loss": loss, **{f"grad {n}": g for n, g in grads.items()}, **{f"param {n}": p for n, p in params.items()}}


def _float64_reference(base: torch.nn.Module, inputs: dict, target: Target, kind: str) -> dict[str, torch.Tensor]:
    model = copy.deepcopy(base).double()
    if kind == "forward":
        return _forward(model.eval(), _double(inputs), "cpu")
    return _flat_train(*_train_step(model, _double(inputs), "cpu", target))


def _conditioning(bad: dict[str, Any], ref32: dict[str, torch.Tensor], got: dict[str, torch.Tensor],
                  ref64: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    """`bad` reclassified as ill-conditioned when the float64 check allows it (see above)."""
    if ref64 is None:
        return bad
    worst = (0.0, 0.0, "")
    for k, r in ref32.items():
        if k not in got or k not in ref64 or got[k].shape != r.shape:
            return bad
        r64 = ref64[k].double()
        d_cpu = (r.double() - r64).abs()
        d_dev = (got[k].double() - r64).abs()
        g = f"grad {k[len('param '):]}"
        if k.startswith("param ") and g in got and g in ref64:
            # AdamW's first step moves a weight by lr * g / (|g| + eps): a gradient error (accepted
            # above, as no worse than CPU float32's) flips its sign or, where |g| ~ eps, changes
            # its size. Weights whose update difference that gradient difference explains are
            # not counted again.
            def step(grad: torch.Tensor) -> torch.Tensor:
                return LR * grad / (grad.abs() + ADAM_EPS)
            explained = d_dev <= 1.05 * (step(got[g].double()) - step(ref64[g].double())).abs() + PARAM_ATOL
            d_dev = torch.where(explained, torch.zeros_like(d_dev), d_dev)
        e_cpu = d_cpu.max().item() if r.numel() else 0.0
        e_dev = d_dev.max().item() if r.numel() else 0.0
        if not (e_dev <= CONDITIONING_SLACK * e_cpu or e_dev == 0.0 or _close(got[k].double(), r64)[0]):
            return bad
        if e_dev > worst[0]:
            worst = (e_dev, e_cpu, k)
    return {"class": "ill-conditioned",
            "error": f"{bad['error']}; vs float64 CPU: tpu {worst[0]:.3g}, CPU float32 {worst[1]:.3g} ({worst[2]})"}


def run_target(target: Target, modes: tuple[str, ...] = ("strict", "fused"), train: bool = True) -> dict[str, Any]:
    """Everything the sweep records for one architecture."""
    import torch_tpu

    rec: dict[str, Any] = {"model_type": target.model_type, "head": target.head, "class": target.class_name,
                           "source": target.source}
    t0 = time.perf_counter()
    try:
        base = build(target)
        base.eval()
        inputs = make_inputs(target, base)
        ref_fwd = _forward(base, inputs, "cpu")
        if not ref_fwd:
            raise SetupError("the model returned no floating-point output")
        rec["params"] = sum(p.numel() for p in base.parameters())
        ref_train = None
        if train:
            try:
                ref_train = _train_step(copy.deepcopy(base), inputs, "cpu", target)
            except Exception as e:  # noqa: BLE001 - recorded: CPU cannot train this head as built
                rec["train_setup_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    except Exception as e:  # noqa: BLE001 - recorded as a setup failure
        rec["setup_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        return rec

    ref64: dict[str, dict | None] = {}

    def float64(kind: str) -> dict | None:
        if kind not in ref64:
            try:
                ref64[kind] = _float64_reference(base, inputs, target, kind)
            except Exception:  # noqa: BLE001 - the model cannot run in float64: no reclassification
                ref64[kind] = None
        return ref64[kind]

    for mode in modes:
        res: dict[str, Any] = {}
        with torch_tpu.mode(mode):
            try:
                model = copy.deepcopy(base).to("tpu")
                got = _forward(model, inputs, "tpu")
                bad = _compare(ref_fwd, got, "forward")
                if bad:
                    bad = _conditioning(bad, ref_fwd, got, float64("forward"))
                res["forward"] = bad or {"class": "pass"}
            except Exception as e:  # noqa: BLE001 - classified and recorded
                res["forward"] = classify(e)
            if ref_train is not None:
                try:
                    model = copy.deepcopy(base).to("tpu")
                    loss, grads, params = _train_step(model, inputs, "tpu", target)
                    bad = (_compare({"loss": ref_train[0]}, {"loss": loss}, "train")
                           or _compare(ref_train[1], grads, "grad")
                           or _compare_params(ref_train[2], params, ref_train[1]))
                    if bad:
                        bad = _conditioning(bad, _flat_train(*ref_train), _flat_train(loss, grads, params),
                                            float64("train"))
                    res["train"] = bad or {"class": "pass"}
                except Exception as e:  # noqa: BLE001
                    res["train"] = classify(e)
            else:
                res["train"] = {"class": "setup", "error": rec.get("train_setup_error", "not run")}
            try:
                torch_tpu.sync()
            except Exception:  # noqa: BLE001 - a failed pending graph was already reported above
                pass
        rec[mode] = res
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec
