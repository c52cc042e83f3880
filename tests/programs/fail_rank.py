"""Every rank: a first allreduce, then rank ``--rank`` fails while the others enter a second
allreduce that only it could complete (tests/test_abort_on_error*.py).

``--how raise``: an uncaught exception; ``--how kill``: SIGKILL of itself. ``--setup``: call
``chainermn_rt.setup()`` first; without it, a plain mpi4py/ChainerMN script.
"""

import argparse
import os
import signal
import socket

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--how", choices=("raise", "kill"), default="raise")
parser.add_argument("--setup", action="store_true")
args = parser.parse_args()
# A site's time-limit warning signal (sandbox: USR2 60 s before) must not end a hung job:
# a hang shows as TIMEOUT, never as a failure.
signal.signal(signal.SIGUSR2, signal.SIG_IGN)

if args.setup:
    import chainermn_rt

    comm, _ = chainermn_rt.setup()
    world = comm.mpi_comm
else:
    import chainermn
    from mpi4py import MPI

    comm = chainermn.create_communicator("naive")
    world = MPI.COMM_WORLD

rank = world.Get_rank()
total = world.allreduce(1)
print(f"rank {rank} on {socket.gethostname()}: first allreduce {total}", flush=True)
if rank == args.rank:
    if args.how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"rank {rank} fails on purpose")
world.allreduce(1)  # never completes: rank --rank is gone
print(f"rank {rank}: second allreduce returned", flush=True)
