"""Other projects' signatures over the fuseops ops: :mod:`fuseops.compat.vllm`, :mod:`fuseops.compat.flaggems`."""

__all__ = ["vllm", "flaggems"]
