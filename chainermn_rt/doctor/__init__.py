"""``chainermn-rt doctor``: is the stack right, here or in an image, and is a cluster right,
checked by a real job (docs/doctor.md).

- ``check.py``: the ``Check`` every check returns and its statuses (PASS, FAIL, n/a);
- ``stack.py``: MPI, UCX, PMIx, NCCL, CuPy, cuDNN, mpi4py and the pins of this machine or image;
- ``facts.py``: what one rank of a doctor job can tell about itself (host, GPU, CPUs, versions);
- ``probe.py``: the program each rank of a doctor job runs; writes the reports;
- ``reports.py``: the job folder's files;
- ``cluster.py``: pure cross-rank checks over the reports;
- ``node_check.py``: with pyxis, enroot asked on every node of the job before the ranks' step;
- ``table.py``: the printed table and the ``--exclude-bad`` node list;
- ``job.py``: the doctor job's Plan and its verdict.
"""
