"""Two emulated devices (TORCH_TPU_NUM_DEVICES=2). The device count is fixed per process, so
each check runs in a fresh interpreter (OpenReg: test_device multi-device cases)."""

from __future__ import annotations

TWO = {"TORCH_TPU_NUM_DEVICES": "2"}

PRELUDE = """
import torch, torch_tpu
assert torch.tpu.device_count() == 2, torch.tpu.device_count()
"""


def test_count_and_properties(subprocess_py) -> None:
    out = subprocess_py(PRELUDE + """
assert torch.accelerator.device_count() == 2
assert torch.tpu.get_device_name(1).endswith("1")
assert torch.tpu.get_device_properties(1).total_memory > 0
try:
    torch.empty(1, device="tpu:2")
except RuntimeError as e:
    assert "Invalid device index tpu:2" in str(e), e
else:
    raise AssertionError("tpu:2 accepted")
print("ok")
""", **TWO).stdout
    assert out.strip() == "ok"


def test_copies_between_devices(subprocess_py) -> None:
    subprocess_py(PRELUDE + """
x = torch.arange(12.0).reshape(3, 4)
a = x.to("tpu:0")
a.mul_(2)                       # queued on device 0 before the copy
b = a.to("tpu:1")
assert b.device == torch.device("tpu:1"), b.device
torch.testing.assert_close(b.cpu(), x * 2)
c = b.t().to("tpu:0")            # non-contiguous source
assert c.device.index == 0
torch.testing.assert_close(c.cpu(), (x * 2).t())
d = torch.empty(3, 4, device="tpu:1")
d.copy_(a)
torch.testing.assert_close(d.cpu(), x * 2)
a.copy_(torch.ones(3, 4, device="tpu:1"))
torch.testing.assert_close(a.cpu(), torch.ones(3, 4))
""", **TWO)


def test_device_context_and_ops_on_device_1(subprocess_py) -> None:
    subprocess_py(PRELUDE + """
with torch.tpu.device(1):
    assert torch.tpu.current_device() == 1
    y = torch.ones(4, device="tpu")
    assert y.device == torch.device("tpu:1"), y.device
    assert torch.tpu.current_stream().device_index == 1
assert torch.tpu.current_device() == 0
z = (y * 3 + 1).sum()
assert z.device.index == 1 and z.item() == 16.0
w = torch.nn.Linear(4, 2).to("tpu:1")
assert w(y).device.index == 1
with torch.tpu.device_of(y):
    assert torch.tpu.current_device() == 1
torch.tpu.set_device(1)
assert torch.empty(1, device="tpu").device.index == 1
torch.tpu.set_device(0)
""", **TWO)


def test_mixed_devices_raise(subprocess_py) -> None:
    subprocess_py(PRELUDE + """
a = torch.ones(3, device="tpu:0")
b = torch.ones(3, device="tpu:1")
for fn in (lambda: a + b, lambda: torch.mm(a.view(3, 1), b.view(1, 3)), lambda: a.add_(b)):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        assert "Expected all tensors to be on the same device" in msg, msg
        assert "tpu:0" in msg and "tpu:1" in msg, msg
    else:
        raise AssertionError("mixed tpu:0/tpu:1 operands accepted")
""", **TWO)


def test_per_device_memory_streams_and_rng(subprocess_py) -> None:
    subprocess_py(PRELUDE + """
torch.tpu.synchronize()
base0, base1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
t = torch.empty(1 << 20, dtype=torch.uint8, device="tpu:1")
assert torch.tpu.memory_allocated(1) == base1 + (1 << 20)
assert torch.tpu.memory_allocated(0) == base0
del t
assert torch.tpu.memory_allocated(1) == base1

s1 = torch.tpu.Stream(device=1)
assert s1.device_index == 1 and torch.tpu.default_stream(1).device_index == 1
x = torch.zeros(100, device="tpu:1")
with torch.tpu.stream(s1):
    assert torch.tpu.current_device() == 1
    x.add_(5)
torch.tpu.synchronize(1)
assert x.sum().item() == 500.0
assert torch.tpu.current_device() == 0

torch.tpu.manual_seed_all(3)
a0 = torch.randn(8, device="tpu:0").cpu()
a1 = torch.randn(8, device="tpu:1").cpu()
torch.testing.assert_close(a0, a1, rtol=0, atol=0)   # same seed, separate generators
states = torch.tpu.get_rng_state_all()
assert len(states) == 2
b1 = torch.randn(8, device="tpu:1").cpu()
torch.tpu.set_rng_state(states[1], device=1)
torch.testing.assert_close(torch.randn(8, device="tpu:1").cpu(), b1, rtol=0, atol=0)
""", **TWO)


def test_events_across_devices(subprocess_py) -> None:
    subprocess_py(PRELUDE + """
x = torch.zeros(1000, device="tpu:0")
for _ in range(10):
    x.add_(1)
e = torch.tpu.Event()
e.record(torch.tpu.current_stream(0))
torch.tpu.current_stream(1).wait_event(e)
y = x.to("tpu:1")
torch.testing.assert_close(y.cpu(), torch.full((1000,), 10.0))
""", **TWO)


def test_foreach_lists_spanning_devices_run_per_device_like_cuda(subprocess_py) -> None:
    # CUDA's _foreach_ kernels take the per-tensor route when a list spans devices; ours run one
    # lowered call per device. _foreach_copy_ also copies elements across devices (FSDP2 does).
    subprocess_py(PRELUDE + """
torch.manual_seed(0)
cpu = [torch.randn(4), torch.randn(2, 3), torch.randn(5), torch.randn(3)]
devs = ["tpu:0", "tpu:1", "tpu:0", "tpu:1"]
xs = [t.to(d) for t, d in zip(cpu, devs)]
ys = [(t * 2).to(d) for t, d in zip(cpu, devs)]
out = torch._foreach_add(xs, ys, alpha=0.5)
for o, t, d in zip(out, cpu, devs):
    assert o.device == torch.device(d), (o.device, d)
    torch.testing.assert_close(o.cpu(), t + 0.5 * (t * 2))
torch._foreach_mul_(xs, [1.0, 2.0, 3.0, 4.0])
for x, t, s in zip(xs, cpu, [1.0, 2.0, 3.0, 4.0]):
    torch.testing.assert_close(x.cpu(), t * s)
norms = torch._foreach_norm(xs)
torch.testing.assert_close(torch.stack([n.cpu() for n in norms]), torch.stack([(t * s).norm() for t, s in zip(cpu, [1.0, 2.0, 3.0, 4.0])]))
# copy_: destinations on one device, sources on the other and on the CPU
dst = [torch.zeros(4, device="tpu:1"), torch.zeros(2, 3, device="tpu:1"), torch.zeros(5, device="tpu:0")]
src = [cpu[0].to("tpu:0"), cpu[1], cpu[2].to("tpu:0")]
torch._foreach_copy_(dst, src)
for d, t in zip(dst, cpu[:3]):
    torch.testing.assert_close(d.cpu(), t)
assert [d.device.index for d in dst] == [1, 1, 0]
# An element whose own operands sit on two devices is an error, as add_ on them would be.
try:
    torch._foreach_add_([torch.ones(2, device="tpu:0"), torch.ones(2, device="tpu:1")],
                        [torch.ones(2, device="tpu:1"), torch.ones(2, device="tpu:1")])
except RuntimeError as e:
    assert "Expected all tensors to be on the same device" in str(e), e
else:
    raise AssertionError("mixed devices within one element accepted")
# An optimizer over parameters on two devices (foreach implementation) matches CPU.
ps = [torch.nn.Parameter(t.clone()) for t in cpu]
tps = [torch.nn.Parameter(t.to(d)) for t, d in zip(cpu, devs)]
for params in (ps, tps):
    opt = torch.optim.AdamW(params, lr=0.1, foreach=True)
    for step in range(3):
        for p in params:
            p.grad = torch.ones_like(p) * (step + 1)
        opt.step()
for p, q in zip(ps, tps):
    torch.testing.assert_close(q.detach().cpu(), p.detach())
""", **TWO)
