"""The sandbox's Slurm configuration, rendered from a site profile (a pure function, no I/O).

>>> from chainermn_rt.site import load_site, resolve_site
>>> from chainermn_rt.sandbox.settings import sandbox_settings
>>> site = load_site(resolve_site("sandbox"))
>>> files = render_files(site, sandbox_settings(site, state_dir="/s"))
>>> node2 = next(l for l in files["etc/slurm.conf"].splitlines() if l.startswith("NodeName=node2"))
>>> node2.split()[1:5]
['NodeHostname=node2', 'NodeAddr=10.213.0.3', 'CPUs=4', 'RealMemory=2048']
"""

from __future__ import annotations

import jinja2

from chainermn_rt.quoting import sh, sh_join
from chainermn_rt.sandbox import accounting, netns, pyxis
from chainermn_rt.sandbox.settings import SandboxSettings, spanning
from chainermn_rt.sandbox.stacks import Launcher
from chainermn_rt.site import Site, data_dir

# Client commands get a wrapper in STATE/bin that finds the sandbox's controller.
CLIENTS = ("sbatch", "srun", "salloc", "squeue", "scontrol", "sinfo", "scancel", "sacct",
           "sacctmgr")
DEFAULT_MEMORY_MB = 1024
# How long Slurm's PMIx plugin waits for a fence (its default, 300 s, is shorter than a
# 16 x 8 MPI_Init on 2 cores).
PMIX_TIMEOUT_S = 900
# Each daemon has a network namespace of its own: Slurm's default ports never collide.
CONTROLLER_PORT, SLURMD_PORT = 6817, 6818


def node_list(names: list[str]) -> str:
    """``["node1", "node2"]`` -> ``"node[1-2]"`` (names are consecutive by construction)."""
    return names[0] if len(names) == 1 else f"node[1-{len(names)}]"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir() / "sandbox")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["sh"] = lambda value: sh(str(value), "a sandbox script")
    return env


def task_exports(settings: SandboxSettings) -> dict[str, str]:
    """Variables every task gets: Open MPI stays on the sandbox's network; with ``[sandbox]
    hwloc_xml``, hwloc (lstopo, Open MPI) reads that hardware instead of the host's."""
    exports = {"OMPI_MCA_btl_tcp_if_include": str(settings.subnet),
               "OMPI_MCA_oob_tcp_if_include": str(settings.subnet)}
    if settings.hwloc_xml is not None:
        exports["HWLOC_XMLFILE"] = str(settings.hwloc_xml)
    return exports


def render_files(site: Site, settings: SandboxSettings, host_netns_inode: int = 0,
                 launch: Launcher | None = None, users: tuple[str, ...] = ()) -> dict[str, str]:
    """Every generated file, keyed by its path relative to the state folder. ``launch``: the
    stack's (default the host's own), with its ``tools`` pyxis's files; ``users``: besides
    root, in the account."""
    launch = launch or Launcher(settings)
    names = settings.node_names()
    nodes = [{"name": n, "addr": str(settings.node_address(i))}
             for i, n in enumerate(names, start=1)]
    gpus = max(p.topology.gpus for p in site.partitions)
    gpu_type = next((p.gpu_type for p in site.partitions if p.gpu_type), None)
    gres = (f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}") if gpus else ""
    default = site.partition(None).name
    partitions = [{"name": p.name, "nodes": node_list(names), "max_nodes": p.nodes,
                   "max_time": p.max_time, "default": "YES" if p.name == default else "NO"}
                  for p in spanning(site, settings.nodes).partitions]
    memory = [p.memory_mb for p in site.partitions if p.memory_mb]
    values = {
        "site_path": str(site.path), "cluster": site.name, "state": str(settings.state_dir),
        "tmpfs": settings.tmpfs, "spool_dir": settings.spool_dir,
        "controller_port": CONTROLLER_PORT, "slurmd_port": SLURMD_PORT,
        "nodes": nodes, "cpus": max(p.cpus_per_node for p in site.partitions),
        "memory_mb": max(memory) if memory else DEFAULT_MEMORY_MB, "gres": gres,
        "gpus": gpus, "gpu_type": gpu_type, "partitions": partitions,
        "head_addr": str(settings.head_address()), "head_name": netns.HEAD,
        "exports": task_exports(settings), "accounting": settings.accounting,
        "pmix_timeout_s": PMIX_TIMEOUT_S,
        "plugstack": f"{settings.state_dir}/{pyxis.PLUGSTACK}" if launch.tools else None,
        "task_prolog": launch.tools is None or pyxis.task_prolog(settings),
    }
    env = _env()
    files = {f"etc/{name}": env.get_template(f"{name}.j2").render(values)
             for name in ("slurm.conf", "gres.conf", "cgroup.conf", "mpi.conf", "task_prolog.sh",
                         "hosts")}
    files["env.sh"] = env.get_template("env.sh.j2").render(values)
    if settings.accounting:
        files["etc/slurmdbd.conf"] = env.get_template("slurmdbd.conf.j2").render(values)
        files["etc/accounts.cfg"] = accounting.load_file(site, users)
        files["etc/accounts.sacctmgr"] = accounting.sacctmgr_commands(site)
    if launch.tools is not None:
        files.update(pyxis.files(settings, launch.tools))
    enter = sh_join(launch.client(), "the sandbox's root")
    for command in CLIENTS:
        files[f"bin/{command}"] = env.get_template("client.sh.j2").render(
            values, command=command, path=launch.program(command), enter=enter,
            netns=str(netns.path(settings.netns(netns.HEAD))), host_netns_inode=host_netns_inode)
    return files
