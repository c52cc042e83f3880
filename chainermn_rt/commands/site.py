"""``chainermn-rt site check FILE [--live]``: validate a profile; compare it with the cluster."""

from __future__ import annotations

import argparse

from chainermn_rt.site import load_site, resolve_site


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check"], help="what to do with the profile")
    parser.add_argument("file", help="a site profile (.toml) or a shipped one's name")
    parser.add_argument("--live", action="store_true",
                        help="also compare with the running cluster (scontrol, srun --mpi=list)")


def run(args: argparse.Namespace) -> int:
    site = load_site(resolve_site(args.file), "FILE")
    parts = ", ".join(f"{p.name} ({p.nodes} nodes x {len(p.topology.slots)} slots, "
                      f"{p.topology.gpus} GPUs)" for p in site.partitions)
    print(f"{site.path}: ok: site {site.name!r}, launcher {site.launcher}, "
          f"runtime {site.container.runtime}, partitions {parts}")
    if not args.live:
        return 0
    from chainermn_rt.live import compare
    from chainermn_rt.submission import Cluster

    differences = compare(site, Cluster.of(site).slurm)
    for line in differences:
        print(f"differs: {line}")
    print("live: matches the cluster" if not differences
          else f"live: {len(differences)} difference(s)")
    return 1 if differences else 0
