"""The benchmarks behind ``chainermn-rt bench`` (commands/bench.py; docs/benchmarks.md).

- ``allreduce.py``: one measurement (``measure``) or a sweep of sizes and communicators;
  ``pattern.py`` its correctness check; ``allreduce_report.py`` its table, JSON, CSV, plot;
  ``allreduce_run.py`` the command's run: its checks before MPI, the GPU communicators every
  rank can run, the sweep with its table, progress bar and files;
- ``train.py``: images/s of ``chainermn_rt.models`` on synthetic data, and the share of
  gradient averaging (``check``: what is checked before MPI starts);
- ``world.py``: where the ranks run, and whether this node's memory and GPUs fit a request.

Importing them is light: mpi4py, chainer, CuPy and matplotlib load when used.
"""
