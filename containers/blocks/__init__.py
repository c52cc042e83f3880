"""One module per component (hpccm's building blocks). A component's functions return a
:class:`~containers.recipe.Block`: its build-stage steps, the packages and steps of the slim
runtime stage, and its environment (``block(...)``, or one function per source where a
component has several: ``openmpi.debian``/``upstream``/``binary``). ``apt``, ``source``,
``debian_source`` and ``metadata`` are helpers that return steps for the others. Each module's
docstring shows what it emits; ``bundle`` is this project's own: chainermn_rt and the patched
chainer wheel.
"""
