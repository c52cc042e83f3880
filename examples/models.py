"""The examples' models: an MLP for MNIST-sized inputs and ResNet-50 (He et al., 2015).

Defined in ``chainermn_rt.models`` (``chainermn-rt bench train`` uses them too, also from an
installed wheel, where examples/ is absent); re-exported here under the same names.
"""

from __future__ import annotations

from chainermn_rt.models import MLP, ResNet50

__all__ = ["MLP", "ResNet50"]
