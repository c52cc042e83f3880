"""Sub-commands of ``chainermn-rt``; see chainermn_rt/cli.py."""
