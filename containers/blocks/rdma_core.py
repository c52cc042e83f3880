"""rdma-core user space (libibverbs, rdmacm, providers) from the distribution.

Example::

    >>> BUILD_PACKAGES
    ['libibverbs-dev', 'librdmacm-dev', 'rdma-core', 'ibverbs-providers']
"""

BUILD_PACKAGES = ["libibverbs-dev", "librdmacm-dev", "rdma-core", "ibverbs-providers"]
RUNTIME_PACKAGES = ["libibverbs1", "librdmacm1", "ibverbs-providers", "rdma-core"]
