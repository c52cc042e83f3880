"""Models of the examples and of ``chainermn-rt bench train``: an MLP for MNIST-sized inputs
and ResNet-50 (He et al., 2015). Here, not in examples/, so an installed wheel has them.

ResNet-50 has exactly the parameters of the usual definition (161 arrays,
25,557,032 values with 1000 classes), initialised here: nothing is downloaded.

Example::

    >>> model = ResNet50(n_class=1000)
    >>> sum(p.size for p in model.params()), len(list(model.params()))
    (25557032, 161)
"""

from __future__ import annotations

import chainer
import chainer.functions as F
import chainer.links as L


class MLP(chainer.Chain):
    """``n_in`` -> ``n_units`` -> ``n_units`` -> ``n_out`` with ReLU."""

    def __init__(self, n_units: int = 1000, n_out: int = 10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class _ConvBN(chainer.Chain):
    def __init__(self, n_in, n_out, ksize, stride=1, pad=0):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(n_in, n_out, ksize, stride, pad, nobias=True,
                                        initialW=chainer.initializers.HeNormal())
            self.bn = L.BatchNormalization(n_out)

    def forward(self, x):
        return self.bn(self.conv(x))


class _Bottleneck(chainer.Chain):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand, plus the shortcut."""

    def __init__(self, n_in, n_mid, n_out, stride):
        super().__init__()
        with self.init_scope():
            self.a = _ConvBN(n_in, n_mid, 1)
            self.b = _ConvBN(n_mid, n_mid, 3, stride, 1)
            self.c = _ConvBN(n_mid, n_out, 1)
            self.shortcut = _ConvBN(n_in, n_out, 1, stride) if (n_in != n_out or
                                                                  stride != 1) else None

    def forward(self, x):
        h = F.relu(self.a(x))
        h = F.relu(self.b(h))
        h = self.c(h)
        return F.relu(h + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet50(chainer.Chain):
    """ResNet-50 for ``(N, 3, H, W)`` images; any ``H, W >= 32`` (global average pooling)."""

    insize = 224
    stages = ((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2))

    def __init__(self, n_class: int = 1000):
        super().__init__()
        with self.init_scope():
            self.stem = _ConvBN(3, 64, 7, 2, 3)
            self.blocks = chainer.ChainList()
            n_in = 64
            for depth, n_mid, n_out, stride in self.stages:
                for i in range(depth):
                    self.blocks.append(_Bottleneck(n_in, n_mid, n_out, stride if i == 0 else 1))
                    n_in = n_out
            self.fc = L.Linear(n_in, n_class)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.stem(x)), 3, stride=2, pad=1)
        for block in self.blocks:
            h = block(h)
        return self.fc(F.average(h, axis=(2, 3)))
