"""chainermn_rt and the patched chainer 7.8.1 wheel, installed into the venv.

The package sources are copied in, ``python -m chainermn_rt.compat.build_chainer``
builds the patched chainer wheel, and ``pip install SRC[extras]`` pulls every pin of
pyproject.toml.

Example::

    >>> [s.dest for s in sources("/opt/x/src")][:2]
    ['/opt/x/src/pyproject.toml', '/opt/x/src/README.md']
    >>> print(install("/opt/x/src", ("gpu",)).commands[-1])
    pip install --no-cache-dir --find-links /tmp/wheels '/opt/x/src[gpu]'
"""

from __future__ import annotations

from containers.recipe import Copy, Run

# What `pip install .` needs of the repository (pyproject's packages and package-dir).
SOURCES = ("pyproject.toml", "README.md", "chainermn_rt", "slurm")
WHEELS = "/tmp/wheels"


def sources(src: str) -> list[Copy]:
    return [Copy(path, f"{src}/{path}") for path in SOURCES]


def install(src: str, extras: tuple[str, ...] = ()) -> Run:
    target = f"'{src}[{','.join(extras)}]'" if extras else src
    return Run((f"PYTHONPATH={src} python -m chainermn_rt.compat.build_chainer --out {WHEELS}",
                f"pip install --no-cache-dir --find-links {WHEELS} {target}"),
               comment="the patched chainer wheel, then chainermn_rt with pyproject's pins",
               network=True)
