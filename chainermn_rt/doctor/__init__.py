"""``chainermn-rt doctor --site``: check a cluster with a real job (docs/doctor.md).

- ``facts.py``: what one rank can tell about itself (host, ranks, GPU, CPUs, NUMA, versions);
- ``probe.py``: the program each rank of a doctor job runs: facts, MPI's view, an allreduce with
  a known answer, a bandwidth probe; writes the reports;
- ``reports.py``: the job folder's files;
- ``checks.py``: pure cross-rank checks over the reports;
- ``table.py``: the printed table and the ``--exclude-bad`` node list;
- ``job.py``: request -> script -> submit -> wait -> collect.
"""
