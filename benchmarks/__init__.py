"""Benchmarks run as commands (``python -m benchmarks.<name>``), not as tests."""
