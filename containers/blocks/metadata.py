"""OCI labels listing the stack, and the VERSIONS file the in-image check reads.

Example::

    >>> dict(labels("cpu", "0.1.0", {"openmpi": "4.1.4"}).values)["io.chainermn-rt.openmpi"]
    '4.1.4'
    >>> print(versions_file("cpu", "0.1.0", {"openmpi": "4.1.4"}, {"numpy": "2.4.6"}))
    # /opt/chainermn_rt/VERSIONS: the image's stack; `chainermn-rt doctor --image` checks it.
    flavor = "cpu"
    chainermn-rt = "0.1.0"
    <BLANKLINE>
    [system]
    openmpi = "4.1.4"
    <BLANKLINE>
    [python]
    numpy = "2.4.6"
    <BLANKLINE>
"""

from __future__ import annotations

from containers.recipe import Copy, Label

VERSIONS_PATH = "/opt/chainermn_rt/VERSIONS"
# The Python packages named in the images' labels (all pins are in VERSIONS).
LABELLED = ("chainer", "numpy", "mpi4py", "cupy-cuda12x", "nvidia-nccl-cu12", "nvidia-cudnn-cu12",
            "nvidia-dali-cuda120")


def labels(flavor: str, version: str, system: dict[str, str],
           python: dict[str, str] | None = None) -> Label:
    values = [("org.opencontainers.image.title", f"chainermn-rt-{flavor}"),
              ("org.opencontainers.image.description",
               "ChainerMN (Chainer 7.8.1) data-parallel training with chainermn_rt"),
              ("org.opencontainers.image.version", version),
              ("org.opencontainers.image.licenses", "MIT")]
    stack = {**system, **(python or {})}
    values += [(f"io.chainermn-rt.{name}", stack[name]) for name in sorted(stack)]
    return Label(tuple(values))


def versions_file(flavor: str, version: str, system: dict[str, str],
                  python: dict[str, str]) -> str:
    lines = [(f"# {VERSIONS_PATH}: the image's stack; "
              "`chainermn-rt doctor --image` checks it."),
             f'flavor = "{flavor}"', f'chainermn-rt = "{version}"', "", "[system]"]
    lines += [f'{k} = "{system[k]}"' for k in sorted(system)]
    lines += ["", "[python]"] + [f'{k} = "{python[k]}"' for k in sorted(python)]
    return "\n".join(lines) + "\n"


def copy_versions(flavor: str) -> Copy:
    return Copy(f"containers/{flavor}/VERSIONS", VERSIONS_PATH)
