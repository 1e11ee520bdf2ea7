"""ATen -> IR lowerings: the one table every mode uses (see registry.py for the contract)."""

from . import registry
from .registry import LOWERINGS, register, register_lowering

# Op families register themselves on import.
from . import elementwise, creation, activations, reductions, shape, indexing, linalg, nn, nn_conv, nn_pool, nn_norm, nn_loss, random  # noqa: E402,F401
from . import foreach, special, histogram, triangular, nn_rnn, nn_transformer, nn_embedding_bag  # noqa: E402,F401
from . import complex_ops, fft, lu, qr, svd, number_parts, matrix_exp, logcumsumexp, segment_reduce, pdist  # noqa: E402,F401
from . import nn_upsample_aa, nn_grid_sample, attention_varlen  # noqa: E402,F401
from . import orthogonal_polynomials  # noqa: E402,F401
from . import incomplete_gamma  # noqa: E402,F401

__all__ = ["LOWERINGS", "register", "register_lowering", "registry"]
