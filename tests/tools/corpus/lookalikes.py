"""Strings that say "cuda" without being devices: nothing here may change.

Calling torch.cuda.synchronize() in a docstring is text, not code.
"""

import os

import torch

BACKENDS = {"cuda": "NVIDIA", "rocm": "AMD"}  # a dict key, not a device
print("cuda")  # a print: .cuda() and "cuda" in a comment stay
kernel_language = "cuda"
message = f"cuda kernels: {len(BACKENDS)}"
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
compiled_with = torch.version.cuda
label = "nccl"
print(label, "nccl", kernel_language.upper(), message, compiled_with, BACKENDS["cuda"])


def describe(backend: str = "cuda") -> str:
    return "uses " + backend
