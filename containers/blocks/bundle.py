"""chainermn_rt and the patched chainer 7.8.1 wheel, installed into the venv.

The package sources are copied in, ``python -m chainermn_rt.compat.build_chainer``
builds the patched chainer wheel, and ``pip install SRC[extras]`` pulls every pin of
pyproject.toml.

Example::

    >>> b = block("/opt/x/src", ("gpu",))
    >>> [s.dest for s in b.build[:2]]
    ['/opt/x/src/pyproject.toml', '/opt/x/src/README.md']
    >>> print(b.build[-1].commands[-1])
    pip install --find-links /tmp/wheels '/opt/x/src[gpu]'
"""

from __future__ import annotations

from containers.blocks.python_venv import PIP_CACHE
from containers.recipe import Block, Copy, Run

# What `pip install .` needs of the repository (pyproject's packages and package-dir).
SOURCES = ("pyproject.toml", "README.md", "chainermn_rt", "slurm")
WHEELS = "/tmp/wheels"


def block(src: str, extras: tuple[str, ...] = ()) -> Block:
    target = f"'{src}[{','.join(extras)}]'" if extras else src
    install = Run((f"PYTHONPATH={src} python -m chainermn_rt.compat.build_chainer --out {WHEELS}",
                   f"pip install --find-links {WHEELS} {target}"),
                  comment="the patched chainer wheel, then chainermn_rt with pyproject's pins",
                  network=True, cache=(PIP_CACHE,))
    return Block("chainermn_rt", build=(*(Copy(p, f"{src}/{p}") for p in SOURCES), install))
