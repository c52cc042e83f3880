"""``chainermn-rt rank -- COMMAND``: see chainermn_rt/rank.py."""

import argparse

from chainermn_rt import rank


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program and its arguments, after --")


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return rank.main(command)
