"""The model libraries the sweep draws from, and the selection syntax of `--only`.

- transformers: every architecture with a task head (tiny_configs.py)
- diffusers: tiny UNet / autoencoder configs (diffusers_models.py)
- timm: not swept; `unavailable()` records why (the import error, checked on every sweep)

A selection is a set of source names and/or model types: `--only diffusers,gpt2` sweeps all
diffusers models plus GPT-2.
"""

from __future__ import annotations

from .tiny_configs import Target, architectures

SOURCES = ("transformers", "diffusers", "timm")

# What was tried for timm (and torchvision's own models); the live import error is added by
# unavailable() so the report shows what this environment does, not only what it did once.
TIMM_NOTE = ("timm 1.0.31 depends on torchvision, whose PyPI wheels are built for other torch releases than "
             "this project's torch 2.13.0 CPU build, so torchvision is not installed. With "
             "`pip install --no-deps timm==1.0.31`, `import timm` fails with `ModuleNotFoundError: No module "
             "named 'torchvision'`: timm/layers/create_norm.py:29 (and layers/norm_act.py:20, utils/model.py:8) "
             "import `torchvision.ops.misc.FrozenBatchNorm2d` at module level, and `timm/__init__` imports "
             "`timm.layers`, so no timm model can be created without torchvision. torchvision's own models "
             "(resnet, mobilenet, ...) are not swept for the same reason; transformers' own ResNet, ConvNeXt, "
             "EfficientNet, MobileNet and ViT ports are in the transformers table.")


def diffusers_targets() -> list[Target]:
    from . import diffusers_models as dm
    return [Target(m.name, m.kind, m.class_name, source=dm.SOURCE) for m in dm.MODELS]


def all_targets(selection: set[str] | None = None) -> list[Target]:
    """Every target of every available source, or those a selection names (see module doc)."""
    targets = architectures() + diffusers_targets()
    names = [t.model_type for t in targets]
    assert len(names) == len(set(names)), "model names must be unique across sources (the worker keys on them)"
    if not selection:
        return targets
    unknown = selection - set(SOURCES) - {t.model_type for t in targets}
    if unknown:
        raise ValueError(f"unknown source or model type in the selection: {sorted(unknown)}")
    return [t for t in targets if t.source in selection or t.model_type in selection]


def unavailable() -> dict[str, dict[str, str]]:
    """Sources that cannot be swept in this environment: {source: {"error": ..., "note": ...}}."""
    try:
        import timm  # noqa: F401
    except Exception as e:  # noqa: BLE001 - recorded: the reason the source is not swept
        return {"timm": {"error": f"{type(e).__name__}: {e}", "note": TIMM_NOTE}}
    return {"timm": {"error": "importable, but no timm targets are defined yet", "note": TIMM_NOTE}}


def versions() -> dict[str, str]:
    """The installed version of each swept library."""
    import transformers
    from . import diffusers_models as dm
    return {"transformers": transformers.__version__, "diffusers": dm.version()}
