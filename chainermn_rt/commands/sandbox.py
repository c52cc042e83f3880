"""``chainermn-rt sandbox up|down|status|exec|env``: the local multi-node Slurm sandbox.

    chainermn-rt sandbox up --nodes 2          # idempotent: "already up" when it is
    chainermn-rt sandbox up --stack debian13   # Slurm 24.11, PMIx 5, Open MPI 5, Apptainer
    chainermn-rt sandbox exec -- sbatch job.sh # a client command against the sandbox
    chainermn-rt sandbox down                  # stops what it started, by recorded PIDs
    chainermn-rt sandbox root [-- CMD]         # the Debian 13 root (built once): its path, or
                                               # CMD run inside it
    chainermn-rt sandbox pyxis [--sources DIR] # enroot and pyxis for the nodes (built once,
                                               # `make setup`): their folder
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from chainermn_rt.arguments import integer
from chainermn_rt.errors import EnvironmentProblem, UserError, message_value
from chainermn_rt.sandbox import Sandbox, pyxis_build
from chainermn_rt.sandbox.root import ensure_root, root_env, run_in_root
from chainermn_rt.sandbox.settings import DEFAULT_STACK, STACKS, STATE_VAR
from chainermn_rt.site import SANDBOX_MAX_NODES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "status", "exec", "env", "root",
                                           "pyxis"],
                        help="up, down, status (exit 3 when not up); exec -- CMD runs a client "
                             "command on the sandbox; env prints the lines to source for them; "
                             "root prints the Debian 13 root's folder (built the first time), "
                             "root -- CMD runs CMD inside it; pyxis builds enroot and pyxis for "
                             "the nodes (once: `make setup`) and prints their folder")
    parser.add_argument("argv", nargs="*", help="exec: the command, after --")
    parser.add_argument("--site", default="sandbox",
                        help="the sandbox's site profile (default: the shipped 'sandbox')")
    parser.add_argument("--state", default=None,
                        help=f"state folder (default: ${STATE_VAR}, else the checkout's "
                             "build/sandbox); it names the sandbox: one per folder")
    parser.add_argument("--nodes", type=integer(1, SANDBOX_MAX_NODES), default=None,
                        help=f"compute nodes, 1-{SANDBOX_MAX_NODES} (default: the profile's)")
    parser.add_argument("--stack", choices=list(STACKS), default=None,
                        help="up: whose Slurm, MPI and Apptainer: " + "; ".join(
                            f"{name}, {what}" for name, what in STACKS.items())
                        + f" (default: {DEFAULT_STACK}); the other actions use the stack of "
                          "the sandbox up in the state folder")
    parser.add_argument("--sources", default=None,
                        help="pyxis: the folder of enroot's and pyxis's release tars (default: "
                             "downloaded); either way checked against containers/versions.toml")


def run(args: argparse.Namespace) -> int:
    if args.action == "root":
        return _root(args.argv[1:] if args.argv[:1] == ["--"] else args.argv)
    if args.action == "pyxis":
        sources = Path(args.sources).absolute() if args.sources else None
        if sources is not None and not sources.is_dir():
            raise UserError(f"--sources: {message_value(str(sources))} is not a folder; allowed: "
                            "a folder with enroot's and pyxis's release tars")
        tools = pyxis_build.ensure(sources, stack=args.stack or DEFAULT_STACK,
                                   say=lambda line: print(line, file=sys.stderr, flush=True))
        print(tools.folder)
        return 0
    if args.sources is not None:
        raise UserError("--sources: only for the pyxis action; allowed: sandbox pyxis "
                        "--sources DIR")
    sandbox = Sandbox.from_profile(args.site, nodes=args.nodes, state_dir=args.state,
                                   stack=args.stack)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.action != "exec" and argv:
        raise UserError(f"{args.action}: takes no command; allowed: exec -- COMMAND")
    if args.action == "up":
        print(sandbox.up(say=lambda line: print(line, file=sys.stderr, flush=True)))
    elif args.action == "down":
        print(sandbox.down())
    elif args.action == "status":
        status = sandbox.status()
        print(status)
        return 0 if status.up else EnvironmentProblem.exit_status
    elif args.action == "env":
        sandbox.client()
        print((sandbox.state_dir / "env.sh").read_text(), end="")
    else:
        if not argv:
            raise UserError("exec: missing command; allowed: exec -- COMMAND [ARGS...]")
        sandbox.client()
        sys.stdout.flush()
        try:
            os.execvpe(argv[0], argv, sandbox.env())
        except OSError as err:
            raise UserError(f"exec: cannot run {argv[0]!r}: {err.strerror}") from None
    return 0


def _root(argv: list[str]) -> int:
    """The Debian 13 root: built or checked; its folder printed, or ``argv`` run inside it with
    the current folder (when not ``/``) and /tmp bound at the same paths."""
    root = ensure_root(say=lambda line: print(line, file=sys.stderr, flush=True))
    if not argv:
        print(root.rootfs)
        return 0
    here = os.getcwd()
    binds = ["/tmp", *([here] if here != "/" else [])]
    return run_in_root(root, argv, binds=binds, env={**root_env(), "TERM": "dumb"}
                       if "TERM" not in os.environ else None).returncode
