"""What a cluster reports about itself, read into the facts a site profile holds
(``chainermn-rt site init``, docs/site-profiles.md). Slurm's records are read by
:mod:`chainermn_rt.slurm_records`.

- :mod:`.hwloc`: a node's ``lstopo --whole-system --of xml``: NUMA nodes, cores, GPUs and HCAs
  with their PCIe switches;
- :mod:`.nvidia`: ``/proc/driver/nvidia/gpus/*/information`` (Slurm's GPU order follows the
  device minors) and ``nvidia-smi topo -m`` (a cross-check);
- :mod:`.slots`: one slot per GPU in Slurm's order from the above.

Each is a pure function of text, tested on fixtures without Slurm or a GPU.
"""
