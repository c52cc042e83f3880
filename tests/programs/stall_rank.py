"""Five training iterations of a tiny model with ChainerMN's multi-node optimizer; rank
``--rank`` misbehaves before iteration 4 (tests/test_watchdog*.py).

``--how loop``: it never comes back (an endless loop, a stuck loader); ``--how late``: it
comes back after ``--seconds``; ``--how startup``: it sleeps ``--seconds`` before MPI starts;
``--how none``: nobody misbehaves and training goes on for ``--seconds`` (a node to lose).
"""

import argparse
import socket
import time

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
parser.add_argument("--how", choices=("loop", "late", "startup", "none"), default="loop")
parser.add_argument("--seconds", type=float, default=10)
parser.add_argument("--plain", action="store_true",
                    help="an unmodified ChainerMN script: chainermn.create_communicator, no setup")
args = parser.parse_args()

if args.how == "startup":
    from chainermn_rt.job_env import JobEnvironment

    if JobEnvironment.detect().global_rank == args.rank:
        time.sleep(args.seconds)

import chainer  # noqa: E402 - after the start-up delay
import chainer.links as L  # noqa: E402
import chainermn  # noqa: E402
import numpy  # noqa: E402

import chainermn_rt  # noqa: E402

comm = chainermn.create_communicator("naive") if args.plain else chainermn_rt.setup()[0]
model = L.Classifier(L.Linear(4, 2))
optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm)
optimizer.setup(model)
x, t = numpy.ones((2, 4), numpy.float32), numpy.zeros(2, numpy.int32)
if args.how == "none":
    print(f"rank {comm.rank}: training", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        optimizer.update(model, x, t)
for iteration in range(1, 6):
    if comm.rank == args.rank and iteration == 4 and args.how != "none":
        print(f"rank {comm.rank} on {socket.gethostname()} stalls before iteration 4", flush=True)
        if args.how == "loop":
            while True:
                time.sleep(1)
        elif args.how == "late":
            time.sleep(args.seconds)
    optimizer.update(model, x, t)
print(f"rank {comm.rank}: 5 iterations done", flush=True)
