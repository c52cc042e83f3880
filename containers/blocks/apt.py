"""Debian/Ubuntu packages, installed without recommends and without leaving apt's lists.

Example::

    >>> print(install(["python3", "openmpi-bin"]).commands[1])
    apt-get install -y --no-install-recommends openmpi-bin python3
"""

from __future__ import annotations

from containers.recipe import Run

WHY_UNPINNED = ("the suite's security updates replace exact versions; the stable suite and "
                "versions.toml fix what matters")


def install(packages: list[str], comment: str = "") -> Run:
    return Run(
        ("apt-get update",
         "apt-get install -y --no-install-recommends " + " ".join(sorted(set(packages))),
         "apt-get clean",
         "rm -rf /var/lib/apt/lists/*"),
        comment=comment,
        ignore=(("DL3008", WHY_UNPINNED),),
    )
