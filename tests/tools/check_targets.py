"""Factories for ``python -m torch_tpu check`` in tests/tools/test_check.py (each returns
``(model, inputs)``), including ones that plant a wrong lowering first.

A planted lowering replaces a table entry for the whole process, so those factories are only
run in a child process with the program cache's disk tier off (``TORCH_TPU_CACHE_DIR=off``):
the disk tier keys an ATen op's per-op programs without the replaced lowering's fingerprint,
so with it on, the child would load correct programs stored earlier (and store wrong ones for
later processes).
"""

from __future__ import annotations

import torch
from torch import nn

WIDTH, HIDDEN, BATCH = 12, 24, 3  # sizes no other test uses, so no shared program is involved


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, HIDDEN)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    """A pre-norm residual block and a head; returns a dict like many model APIs."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = MLP()
        self.head = nn.Linear(WIDTH, 5)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> dict[str, torch.Tensor]:
        h = x + self.mlp(self.norm(x)) * scale
        return {"logits": self.head(h), "hidden": h}


def make_model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Net(), torch.randn(BATCH, WIDTH)


def make_model_kwargs() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    return Net(), (torch.randn(BATCH, WIDTH),), {"scale": 0.5}


def _plant(op: torch._ops.OpOverload, wrap) -> None:
    from torch_tpu.lowering import registry

    registry.register_lowering(op)(wrap(registry.LOWERINGS[registry.op_key(op)]))


def planted_gelu() -> tuple[nn.Module, torch.Tensor]:
    """aten::gelu lowered as gelu(x) + 0.5: the bug check must find in mlp.act."""

    def wrap(orig):
        def gelu_plus_half(b, x, approximate="none"):
            y = orig(b, x, approximate)
            return b.binary("add", y, b.full(0.5, y.dtype, y.shape))

        return gelu_plus_half

    _plant(torch.ops.aten.gelu.default, wrap)
    return make_model()


def planted_gelu_backward() -> tuple[nn.Module, torch.Tensor]:
    """aten::gelu_backward lowered with twice the gradient: forward is right, backward is not."""

    def wrap(orig):
        def gelu_backward_doubled(b, dy, x, approximate="none"):
            y = orig(b, dy, x, approximate)
            return b.binary("mul", y, b.full(2.0, y.dtype, y.shape))

        return gelu_backward_doubled

    _plant(torch.ops.aten.gelu_backward.default, wrap)
    return make_model()


def not_a_factory() -> int:
    return 3


def _mystery_op():
    """``parity_test::mystery``: an op with CPU and Meta kernels only, so the tpu backend cannot
    run it (no PrivateUse1 kernel, lowering, composite kernel or decomposition)."""
    try:
        return torch.ops.parity_test.mystery.default
    except (AttributeError, RuntimeError):
        lib = torch.library.Library("parity_test", "DEF")  # noqa: TOR901 - lives as long as the process
        lib.define("mystery(Tensor x) -> Tensor")
        lib.impl("mystery", lambda x: x * 2 + 1, "CPU")
        lib.impl("mystery", lambda x: torch.empty_like(x), "Meta")
        _LIBS.append(lib)
        return torch.ops.parity_test.mystery.default


_LIBS: list = []


class WithMystery(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _mystery_op()(self.net(x)["logits"])


def make_unsupported() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    _mystery_op()
    return WithMystery(), torch.randn(BATCH, WIDTH)
