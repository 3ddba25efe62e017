"""Timing shared by the baseline scripts: python/fuseops/timing.py (the method of `fuseops bench`), loaded by path so
that the scripts run without the fuseops extension (FlagGems / FLA alone on PYTHONPATH)."""
import importlib.util
import pathlib

_path = pathlib.Path(__file__).resolve().parents[2] / "python" / "fuseops" / "timing.py"
_spec = importlib.util.spec_from_file_location("fuseops_timing", _path)
_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timing)

time_graph_us = _timing.time_graph_us
launches_for = _timing.launches_for
cold_sets = _timing.cold_sets
warm_cold_us = _timing.warm_cold_us
