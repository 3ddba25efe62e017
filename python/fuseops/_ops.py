"""Loads the extension library ``_C.so`` (next to this file), which registers ``torch.ops.fuseops``."""

import os

import torch

library_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.so")

if not os.path.exists(library_path):
    raise ImportError(
        f"fuseops: the extension library {library_path} is missing. Build it with "
        "`pip install --no-build-isolation --no-deps --no-index .` in the fuseops checkout, or with a CMake build "
        "(FUSEOPS_BUILD_TORCH=ON) that writes it into python/fuseops/."
    )
torch.ops.load_library(library_path)

ops = torch.ops.fuseops
"""The raw ops: they write caller-given outputs and return None (schemas: bindings/torch/registration.cpp)."""
