"""ATen -> IR lowerings: the one table every mode uses (see registry.py for the contract)."""

from . import registry
from .registry import LOWERINGS, register, register_lowering

# Op families register themselves on import.
from . import elementwise, reductions, shape, indexing, linalg, nn, nn_conv, nn_pool, nn_norm, nn_loss, random, foreach, special  # noqa: E402,F401
from . import histogram, triangular, nn_rnn, nn_transformer, nn_embedding_bag, complex_ops, fft, lu, qr, svd, number_parts, nn_upsample_aa  # noqa: E402,F401
from . import matrix_exp, logcumsumexp, nn_grid_sample  # noqa: E402,F401

__all__ = ["LOWERINGS", "register", "register_lowering", "registry"]
