"""What a cluster reports about itself, read into the facts a site profile holds
(``chainermn-rt site init``, docs/site-profiles.md). Slurm's records are read by
:mod:`chainermn_rt.slurm_records`.

- :mod:`.hwloc`: a node's ``lstopo --whole-system --of xml``: NUMA nodes, cores, GPUs and HCAs
  with their PCIe switches; :mod:`.cores`: its cores and the NUMA nodes that hold them, by
  hwloc's rules (caches between a core and its PUs, PUs without a core, CPUs in no NUMA node);
- :mod:`.nvidia`: ``/proc/driver/nvidia/gpus/*/information`` (Slurm's GPU order follows the
  device minors) and ``nvidia-smi topo -m`` (a cross-check);
- :mod:`.slots`: one slot per GPU in Slurm's order from the above;
- :mod:`.node_report`: the script one ``srun`` step runs on a node (lstopo, the driver's
  files, InfiniBand ports, container runtimes) and the parser of what it prints (apart from
  the doctor's per-rank probe, :mod:`chainermn_rt.doctor.probe`).

Each of these is a pure function of text, tested on fixtures without Slurm or a GPU.
:mod:`.survey` asks Slurm and runs the node step (``site init``); :mod:`.profile` writes the
profile's text from the facts.
"""
