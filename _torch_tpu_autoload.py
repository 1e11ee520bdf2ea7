"""Entry point for torch's device-backend autoload (``import torch`` loads torch_tpu).

Kept outside the torch_tpu package so that a broken or half-built installation warns
instead of making ``import torch`` itself fail.
"""


def load() -> None:
    try:
        import torch_tpu  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the installation
        import warnings

        warnings.warn(f"torch_tpu is installed but failed to load: {exc}", RuntimeWarning, stacklevel=2)
