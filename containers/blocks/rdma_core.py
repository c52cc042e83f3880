"""rdma-core user space (libibverbs, librdmacm, the providers) from the distribution.

Example::

    >>> block().runtime_packages
    ('ibverbs-providers', 'libibverbs1', 'librdmacm1')
"""

from __future__ import annotations

from containers.recipe import Block


def block() -> Block:
    return Block("rdma-core", build_packages=("libibverbs-dev", "librdmacm-dev"),
                 runtime_packages=("ibverbs-providers", "libibverbs1", "librdmacm1"))
