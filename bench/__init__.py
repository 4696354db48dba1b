"""Benchmarks; run them as scripts (`python bench/compare.py`), not as tests."""
