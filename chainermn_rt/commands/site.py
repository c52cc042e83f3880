"""``chainermn-rt site check FILE [--live]``: validate a profile; compare it with the cluster.
``chainermn-rt site init --partition P --output FILE``: write a profile from what the cluster
reports (docs/site-profiles.md, "Writing a profile with site init").
``chainermn-rt site reframe --site FILE --output cfg.py``: a ReFrame configuration for the
profile (docs/reframe.md)."""

from __future__ import annotations

import argparse
import time
import tomllib
from pathlib import Path

from chainermn_rt.arguments import Parser, output_file
from chainermn_rt.errors import UserError
from chainermn_rt.site import NAME, load_site, parse_site, resolve_site


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    parser_class=Parser)
    check = actions.add_parser("check", help="validate a profile (--live: and compare it with "
                               "the running cluster)")
    check.add_argument("file", help="a site profile (.toml) or a shipped one's name")
    check.add_argument("--live", action="store_true",
                       help="also compare with the running cluster (scontrol, srun --mpi=list)")
    init = actions.add_parser(
        "init", help="write a profile from what the cluster reports: scontrol, srun --mpi=list, "
        "and one srun step per node shape running lstopo --whole-system")
    init.add_argument("--partition", action="append", required=True, metavar="P",
                      help="a Slurm partition to describe (repeat for more)")
    init.add_argument("--output", type=Path, required=True, metavar="FILE",
                      help="the profile to write (.toml)")
    init.add_argument("--name", help="the site's name (default: Slurm's ClusterName)")
    init.add_argument("--force", action="store_true", help="replace an existing --output")
    reframe = actions.add_parser(
        "reframe", help="write a ReFrame configuration for the profile; its checks ship in "
        "the package (docs/reframe.md)")
    reframe.add_argument("--site", required=True, help="a site profile (.toml) or a shipped "
                         "one's name")
    reframe.add_argument("--output", type=Path, required=True, metavar="FILE",
                         help="the configuration to write (.py)")
    reframe.add_argument("--scheduler", choices=("auto", "slurm", "squeue"), default="auto",
                         help="ReFrame's job backend; auto: squeue where Slurm keeps no "
                         "accounting (asks scontrol show config), else slurm")
    reframe.add_argument("--python", help="the ranks' Python (default: the profile's, else "
                         "this one)")
    reframe.add_argument("--force", action="store_true", help="replace an existing --output")


def run(args: argparse.Namespace) -> int:
    return {"init": _init, "reframe": _reframe}.get(args.action, _check)(args)


def _new_output(args: argparse.Namespace, suffix: str) -> Path:
    output = output_file(args.output, "--output", (suffix,))
    if output.exists() and not args.force:
        raise UserError(f"--output: {output} exists; allowed: a new file, or --force to "
                        "replace it")
    return output


def _reframe(args: argparse.Namespace) -> int:
    import sys

    from chainermn_rt.files import write_atomically
    from chainermn_rt.reframe.config import config_text, configuration, ranks_python, scheduler_for
    from chainermn_rt.slurm_records import config
    from chainermn_rt.submission import Cluster

    output = _new_output(args, ".py")
    site = load_site(resolve_site(args.site), "--site")
    scheduler = args.scheduler if args.scheduler != "auto" else scheduler_for(
        config(Cluster.of(site).slurm.output(["scontrol", "show", "config"])))
    python = ranks_python(site, args.python, sys.executable)
    text = config_text(configuration(site, scheduler, python), str(site.path))
    write_atomically(output, lambda f: f.write(text))
    print(f"wrote {output}: system {site.name}, scheduler {scheduler}, partitions "
          f"{', '.join(p.name for p in site.partitions)}")
    return 0


def _check(args: argparse.Namespace) -> int:
    site = load_site(resolve_site(args.file), "FILE")
    parts = ", ".join(f"{p.name} ({p.nodes} nodes x {len(p.topology.slots)} slots, "
                      f"{p.topology.gpus} GPUs)" for p in site.partitions)
    print(f"{site.path}: ok: site {site.name!r}, launcher {site.launcher}, "
          f"runtime {site.container.runtime}, partitions {parts}")
    if not args.live:
        return 0
    from chainermn_rt.live import compare
    from chainermn_rt.submission import Cluster

    notes: list[str] = []
    differences = compare(site, Cluster.of(site).slurm, notes)
    for line in notes:
        print(f"not checked: {line}")
    for line in differences:
        print(f"differs: {line}")
    print("live: matches the cluster" if not differences
          else f"live: {len(differences)} difference(s)")
    return 1 if differences else 0


def _init(args: argparse.Namespace) -> int:
    from chainermn_rt.files import write_atomically
    from chainermn_rt.site_init.profile import profile_text
    from chainermn_rt.site_init.survey import survey
    from chainermn_rt.slurm_client import Slurm

    output = _new_output(args, ".toml")
    if args.name is not None and not NAME.match(args.name):
        raise UserError(f"--name: {args.name!r}; allowed: letters, digits, '.', '_', '-'")
    if len(set(args.partition)) != len(args.partition):
        raise UserError(f"--partition: {args.partition} names one twice; allowed: each once")
    start = time.monotonic()
    facts, warnings, steps = survey(Slurm(), args.partition, args.name)
    text = profile_text(facts, "scontrol show config/partition/node, srun --mpi=list, srun "
                        f"--help and {len(steps)} probe step(s): " + "; ".join(steps))
    parse_site(tomllib.loads(text), output)  # what it writes, it can read
    write_atomically(output, lambda f: f.write(text))
    for line in warnings:
        print(f"warning: {line}")
    print(f"wrote {output}: site {facts.name!r}, partitions "
          f"{', '.join(p.name for p in facts.partitions)}; {len(steps)} Slurm step(s) in "
          f"{time.monotonic() - start:.0f} s")
    return 0
