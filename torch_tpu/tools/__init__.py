"""Command-line tools, run as ``python -m torch_tpu <command>`` (docs/diagnostics.md):

* ``doctor``: an environment report (:mod:`torch_tpu.tools.doctor`);
* ``migrate``: a CUDA-to-tpu migration assistant (:mod:`torch_tpu.tools.migrate`);
* ``check``: CPU-vs-tpu parity, module by module, in each mode (:mod:`torch_tpu.tools.check`).
"""
