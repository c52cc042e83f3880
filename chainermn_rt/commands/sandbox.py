"""``chainermn-rt sandbox up|down|status|exec|env``: the local multi-node Slurm sandbox.

    chainermn-rt sandbox up --nodes 2          # idempotent: "already up" when it is
    chainermn-rt sandbox exec -- sbatch job.sh # a client command against the sandbox
    chainermn-rt sandbox down                  # stops what it started, by recorded PIDs
"""

from __future__ import annotations

import argparse
import os
import sys

from chainermn_rt.sandbox import Sandbox, SandboxError
from chainermn_rt.sandbox.settings import MAX_NODES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "status", "exec", "env"],
                        help="up, down, status; exec -- CMD runs a client command on the "
                             "sandbox; env prints the lines to source for client commands")
    parser.add_argument("argv", nargs="*", help="exec: the command, after --")
    parser.add_argument("--site", default="sandbox",
                        help="the sandbox's site profile (default: the shipped 'sandbox')")
    parser.add_argument("--state", default=None,
                        help="state folder (default: the profile's sandbox.state_dir, "
                             "build/sandbox)")
    parser.add_argument("--nodes", type=int, default=None,
                        help=f"compute nodes, 1-{MAX_NODES} (default: the profile's)")
    parser.add_argument("--mode", default="auto", choices=["auto", "netns", "loopback"],
                        help="auto: network namespaces where permitted, else loopback")


def run(args: argparse.Namespace) -> int:
    sandbox = Sandbox.from_profile(args.site, nodes=args.nodes, state_dir=args.state)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.action != "exec" and argv:
        print(f"chainermn-rt sandbox: error: {args.action} takes no command", file=sys.stderr)
        return 2
    try:
        if args.action == "up":
            print(sandbox.up(args.mode))
        elif args.action == "down":
            print(sandbox.down())
        elif args.action == "status":
            status = sandbox.status()
            print(status)
            return 0 if status.up else 3
        elif args.action == "env":
            print((sandbox.state_dir / "env.sh").read_text(), end="")
        else:
            if not argv:
                print("chainermn-rt sandbox: error: exec needs a command after --", file=sys.stderr)
                return 2
            if not sandbox.status().up:
                print("chainermn-rt sandbox: error: the sandbox is not up "
                      "(chainermn-rt sandbox up)", file=sys.stderr)
                return 3
            full = sandbox.command(argv)
            os.execvpe(full[0], full, sandbox.env())
    except SandboxError as err:
        print(f"chainermn-rt sandbox {args.action}: {err}", file=sys.stderr)
        return 1
    except FileNotFoundError as err:
        print(f"chainermn-rt sandbox {args.action}: {err.filename}: not found "
              "(is the sandbox up?)", file=sys.stderr)
        return 3
    return 0
