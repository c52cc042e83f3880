"""The benchmarks behind ``chainermn-rt bench`` (commands/bench.py; docs/benchmarks.md).

- ``allreduce.py``: one measurement (``measure``) or a sweep of sizes and communicators;
  ``pattern.py`` its correctness check; ``allreduce_report.py`` its table, JSON, CSV, plot;
- ``train.py``: images/s of ``chainermn_rt.models`` on synthetic data, and the share of
  gradient averaging;
- ``world.py``: where the ranks run.

Importing them is light: mpi4py, chainer, CuPy and matplotlib load when used.
"""
