"""libfabric (OFI), the distribution's: the library and its tools, in the runtime stage.

A site binds its own provider into the container (Slingshot's ``cxi``, EFA's ``efa``: a
``libfabric.so.1`` or a provider plugin); MPICH's ``ch4:ofi``, Open MPI's ``ofi`` MTL and BTL
and NCCL's OFI plugin reach it through this library's API. ``libfabric-bin`` has ``fi_info``
(the providers this node has) and ``fi_pingpong``. The ``tcp``, ``udp`` and ``shm`` providers
run anywhere. Both packages at the exact version containers/versions.toml pins; nothing is
built against it and no variable is set (``FI_PROVIDER``, ``FI_PROVIDER_PATH`` are the job's).

Example::

    >>> debian("1.17.0-3").runtime_packages
    ('libfabric1=1.17.0-3', 'libfabric-bin=1.17.0-3')
"""

from __future__ import annotations

from containers.recipe import Block


def debian(version: str) -> Block:
    """Debian's libfabric1 and libfabric-bin (cpu and gpu flavours)."""
    return Block("libfabric", runtime_packages=(f"libfabric1={version}",
                                                f"libfabric-bin={version}"))
