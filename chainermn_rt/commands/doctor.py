"""``chainermn-rt doctor``: check the stack here, or (``--site``) a cluster with a real job.

Without ``--site``: one line per check of this machine's (or image's) stack, exit 1 on any
FAIL::

    $ chainermn-rt doctor --image
    ok    flavor         cpu (from /opt/chainermn_rt/VERSIONS)
    ok    mpi            Open MPI 4.1.4 (/usr/bin/ompi_info)
    n/a   mpi-cuda       cpu flavour (mpi_built_with_cuda_support=false)
    ...

With ``--site SITE --nodes N [render's request options]``: a doctor job on N nodes, rendered
like a training job, each rank reporting where it runs; prints one table of cross-rank checks
and exits 0 only when every check passes (chainermn_rt/doctor/, docs/doctor.md)::

    $ chainermn-rt doctor --site sandbox --nodes 2 --gpus-per-node 2 --exclude-bad bad.txt
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from chainermn_rt.arguments import integer, output_file, seconds
from chainermn_rt.errors import EnvironmentProblem, UserError, print_line
from chainermn_rt.install.layout import FLAVORS
from chainermn_rt.request_arguments import add_site_arguments

IMAGE_HELP = ("without --site: --image alone (inside an image) also compares with the image's "
              "/opt/chainermn_rt/VERSIONS, --image X.sif runs that check inside the SIF with "
              "Apptainer; with --site: the job's container image (overrides container.image)")


class _Options:
    """``add_site_arguments`` for doctor: ``--image`` is also a flag (the local check's)."""

    def __init__(self, parser: argparse.ArgumentParser):
        self._parser = parser

    def add_argument(self, *names, **kwargs):
        if "--image" in names:
            kwargs.update(nargs="?", const=True, metavar="IMAGE", help=IMAGE_HELP)
        return self._parser.add_argument(*names, **kwargs)


def configure(parser: argparse.ArgumentParser) -> None:
    add_site_arguments(_Options(parser), required=False)  # without --site: the local check
    a = parser.add_argument
    a("--json", action="store_true", help="print the checks as JSON")
    a("--flavor", choices=FLAVORS,
      help="with --image X.sif: the flavour the SIF must be (its labels say); refused before "
           "anything starts when it is another")
    a("--out", type=Path, help="with --site: the job's folder (new or empty) for its script, "
                               "log and reports; default: a new doctor-XXXXXXXX here")
    a("--exclude-bad", type=Path, metavar="FILE",
      help="with --site: write the nodes that failed a check there, a Slurm node list for "
           "--exclude (empty when none failed)")
    a("--bandwidth-bytes", type=integer(0), metavar="N",
      help="with --site: allreduce size of the bandwidth probe; default: 64 MiB when the "
           "profile gives [checks] allreduce_busbw_gbps, else none")
    a("--wait-timeout", type=seconds(), metavar="SECONDS",
      help="with --site: give up waiting after this long (exit 1; the job goes on)")


# Options that only a cluster check takes (argparse dest -> flag).
SITE_ONLY = {"nodes": "--nodes", "gpus_per_node": "--gpus-per-node",
             "ranks_per_node": "--ranks-per-node", "partition": "--partition", "time": "--time",
             "runtime": "--runtime", "launcher": "--launcher", "account": "--account",
             "qos": "--qos", "mem": "--mem", "python": "--python", "env": "--env", "out": "--out",
             "exclude_bad": "--exclude-bad", "bandwidth_bytes": "--bandwidth-bytes",
             "wait_timeout": "--wait-timeout"}


def run(args: argparse.Namespace) -> int:
    if args.site is None:
        return _local(args)
    return _cluster(args)


def _local(args: argparse.Namespace) -> int:
    from chainermn_rt.doctor import stack
    from chainermn_rt.doctor.check import FAIL, format_line

    for dest, flag in SITE_ONLY.items():
        if getattr(args, dest) not in (None, []):
            raise UserError(f"{flag}: checks a cluster; allowed: with --site SITE")
    if isinstance(args.image, str):
        return _in_sif(args)
    if args.flavor:
        raise UserError("--flavor: checks a SIF's labels; allowed: with --image X.sif")
    checks = stack.run_checks(image=bool(args.image))
    if args.json:
        print(json.dumps(stack.as_json(checks), indent=2))
    else:
        for check in checks:
            print(format_line(check))
    return 1 if any(c.status == FAIL for c in checks) else 0


def _in_sif(args: argparse.Namespace) -> int:
    """``doctor --image`` inside the SIF ``args.image``, with the host's Apptainer or the Debian
    13 root's; the SIF checked first (a file, a SIF, of ``--flavor``): nothing starts when not."""
    from chainermn_rt import apptainer, sif

    flavor = sif.check_image(args.image, "--image", gpus=False)
    image = Path(args.image)
    if not image.is_file():
        raise UserError(f"--image: {args.image} is not a file; allowed: a SIF file (make sif), "
                        "or --image alone inside an image")
    if args.flavor and flavor != args.flavor:
        what = f"the {flavor} image" if flavor else "not labelled as a chainermn-rt image"
        raise UserError(f"--flavor: {args.image} is {what} (its labels); allowed: the "
                        f"{args.flavor} flavour's SIF (make sif FLAVOR={args.flavor})"
                        + (f", or --flavor {flavor}" if flavor else ""))
    runner = apptainer.find(say=print_line)
    image = image.resolve()
    # the image's environment only; --nv: the host's GPU driver for the gpu flavours' checks
    inner = ["exec", "--cleanenv", *(["--nv"] if (flavor or "").startswith("gpu") else []),
             str(image), "chainermn-rt", "doctor", "--image", *(["--json"] if args.json else [])]
    status = runner.run(inner, binds=[image.parent]).returncode
    if status not in (0, 1):
        raise EnvironmentProblem(f"--image: {runner.where} could not run the doctor in {image} "
                                 f"(exit status {status}; its message is above)")
    return status


def _cluster(args: argparse.Namespace) -> int:
    from chainermn_rt import host_list
    from chainermn_rt.doctor import job, node_check
    from chainermn_rt.doctor.check import FAIL
    from chainermn_rt.doctor.table import exclude_text, format_table
    from chainermn_rt.files import write_atomically
    from chainermn_rt.request_arguments import request_from, site_from
    from chainermn_rt.submission import Cluster

    if args.nodes is None:
        raise UserError("--nodes: missing; allowed: the number of nodes to check")
    if args.flavor:
        raise UserError("--flavor: checks a SIF's labels; allowed: without --site, with "
                        "--image X.sif")
    if args.image is True:
        raise UserError("--image: with --site it names the job's container image; allowed: "
                        "--image IMAGE")
    exclude = output_file(args.exclude_bad, "--exclude-bad")
    out = job.folder_for(args.out)
    site = site_from(args)
    plan = job.doctor_plan(site, request_from(args), out, args.bandwidth_bytes)
    cluster = Cluster.of(site)  # Slurm out of reach: nothing made yet

    def submitted(job_id: str) -> None:
        if not args.json:
            print(f"submitted doctor job {job_id}: {plan.nodes} node(s) x "
                  f"{plan.tasks_per_node} rank(s), folder {out}", flush=True)

    job_id, final, _, _ = cluster.run(job.make_folder(out) / job.SCRIPT, plan,
                                      timeout=args.wait_timeout, submitted=submitted,
                                      say=print_line)
    broken = node_check.broken(out)  # the container step failed there: one line, no table
    checks = [] if broken else job.collect(out, job.expected(site, plan), final, job_id)
    if exclude is not None:
        text = host_list.text(broken) if broken else exclude_text(checks)
        write_atomically(exclude, lambda f: f.write(text))
    if broken:
        raise EnvironmentProblem("; ".join(broken.values()))
    if args.json:
        print(json.dumps({"job": job_id, "folder": str(out),
                          "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        print(format_table(checks), end="")
    return 1 if any(c.status == FAIL for c in checks) else 0
