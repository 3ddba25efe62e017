"""pytest configuration for the Python package's tests: the seed, the header that says what is being tested, and
the in-tree package as a fallback when fuseops is not installed (a CMake build with FUSEOPS_BUILD_TORCH=ON writes
python/fuseops/_C.so).

Inputs are fresh random values on every run; replay a run with FUSEOPS_SEED=<the seed in the header>.
"""

import os
import random
import sys
import zlib
from pathlib import Path

import pytest


def _seed():
    """FUSEOPS_SEED as the C++ tests read it: decimal digits only ("010" is 10), set but empty counts as unset."""
    text = os.environ.get("FUSEOPS_SEED", "")
    if not text:
        return random.SystemRandom().randrange(2**31)
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**64:
        raise pytest.UsageError(f'FUSEOPS_SEED: expected a decimal integer seed in [0, 2^64 - 1], got "{text}"')
    return int(text)


SEED = _seed()
_IN_TREE = Path(__file__).resolve().parents[2] / "python"


def _import_fuseops():
    try:
        import fuseops  # noqa: F401  (installed)
    except ImportError:
        if (_IN_TREE / "fuseops" / "_C.so").exists() and str(_IN_TREE) not in sys.path:
            sys.path.insert(0, str(_IN_TREE))


try:
    _import_fuseops()
except Exception:  # torch missing or broken: the test modules skip and the header says why
    pass


def pytest_report_header(config):
    lines = [f"fuseops tests: seed {SEED} (replay with FUSEOPS_SEED={SEED})"]
    try:
        import torch
    except ImportError as e:
        return lines + [f"torch is not importable ({e}): every Python test skips"]
    lines.append(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
    _import_fuseops()
    try:
        import fuseops
    except ImportError as e:
        lines.append(f"the fuseops extension is not importable ({e}): every Python test skips")
    else:
        lines.append(f"fuseops {fuseops.__version__}: {fuseops.library_path}")
    return lines


@pytest.fixture(autouse=True)
def _seed(request):
    """A per-test seed derived from the run's seed, so a single test replays alone."""
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))
