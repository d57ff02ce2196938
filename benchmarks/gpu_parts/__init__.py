"""The parts of ``benchmarks/gpu_check.py``, one module each, and what they share
(:mod:`gpu_parts.common`)."""
