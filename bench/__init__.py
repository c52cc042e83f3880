"""Benchmarks and checks run by hand or by a session lent a GPU (docs/benchmarks.md);
figures in RESULTS.md. Run from the checkout's root, e.g. ``python -m bench.allreduce``."""
