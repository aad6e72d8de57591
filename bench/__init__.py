"""Benchmarks. Each prints ratios against a baseline measured in the same run and writes its
figures to `docs/benchmarks.md` (see `bench/harness.py`). Tests never assert on speed."""
