"""Every rank: a first allreduce, then rank ``--rank`` fails while the others enter a second
allreduce that only it could complete (tests/test_abort_on_error*.py).

``--how raise``: an uncaught exception; ``exit``: ``sys.exit(3)``; ``thread``: an uncaught
exception in another thread (the main thread goes on); ``kill``: SIGKILL of itself.
``--setup``: call ``chainermn_rt.setup()`` first; without it, a plain mpi4py/ChainerMN script.
"""

import argparse
import os
import signal
import socket
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--how", choices=("raise", "exit", "thread", "kill"), default="raise")
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
    if args.how == "exit":
        sys.exit(3)
    if args.how == "thread":
        def load():
            raise RuntimeError(f"rank {rank}'s loader fails on purpose")
        threading.Thread(target=load, name="loader").start()
        while True:  # the main thread waits for data that never comes
            time.sleep(1)
    raise RuntimeError(f"rank {rank} fails on purpose")
world.allreduce(1)  # never completes: rank --rank is gone
print(f"rank {rank}: second allreduce returned", flush=True)
