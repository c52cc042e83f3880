"""ResNet-50 training steps on one device, Chainer (CuPy) or PyTorch eager: images/s after warm-up.

The same work in both: synthetic float32 images and labels made once on the device,
forward, softmax cross-entropy, backward, momentum SGD; ``--warmup`` iterations first
(kernel compilation, cuDNN autotuning, memory pools), then ``--iterations`` timed between
two device synchronisations. Prints one JSON line. bench/gpu_check.sh runs it on a GPU;
``--device cpu`` runs it on NumPy / CPU (for a smoke test, with a small ``--insize``).

    python bench/resnet50_gpu.py --framework chainer --batch 64
    python bench/resnet50_gpu.py --framework torch --batch 128
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def chainer_steps(args) -> tuple[float, str]:
    import chainer
    import chainer.links as L
    import numpy

    from chainermn_rt.models import ResNet50

    device = chainer.get_device("@numpy" if args.device == "cpu" else f"@cupy:{args.device}")
    device.use()
    model = L.Classifier(ResNet50(n_class=args.n_class))
    model.to_device(device)
    optimizer = chainer.optimizers.MomentumSGD(lr=0.01)
    optimizer.setup(model)
    xp = device.xp
    rng = numpy.random.default_rng(0)
    x = xp.asarray(rng.standard_normal((args.batch, 3, args.insize, args.insize),
                                       dtype=numpy.float32))
    t = xp.asarray(rng.integers(0, args.n_class, args.batch).astype(numpy.int32))

    def step():
        model.cleargrads()
        loss = model(x, t)
        loss.backward()
        optimizer.update()

    def sync():
        if xp is not numpy:
            xp.cuda.Device().synchronize()

    cudnn = "n/a"
    if xp is not numpy:
        cudnn = "on" if chainer.should_use_cudnn(">=auto") else "off (this CuPy has no cuDNN)"
    return _timed(step, sync, args), f"chainer {chainer.__version__}, cuDNN {cudnn}"


def torch_steps(args) -> tuple[float, str]:
    import torch

    try:
        from torchvision.models import resnet50
        model, source = resnet50(num_classes=args.n_class), "torchvision"
    except ImportError:
        model, source = _torch_resnet50(torch, args.n_class), "bench/resnet50_gpu.py"
    device = torch.device("cpu" if args.device == "cpu" else f"cuda:{args.device}")
    torch.backends.cudnn.benchmark = True
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.insize, args.insize, generator=generator).to(device)
    t = torch.randint(0, args.n_class, (args.batch,), generator=generator).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), t).backward()
        optimizer.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return _timed(step, sync, args), f"torch {torch.__version__} eager ({source} ResNet-50)"


def _torch_resnet50(torch, n_class: int):
    """ResNet-50 (v1.5, as torchvision's) for when torchvision is not installed."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, n_class)]
    return nn.Sequential(*layers)


def _timed(step, sync, args) -> float:
    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.iterations):
        step()
    sync()
    return args.batch * args.iterations / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("chainer", "torch"), default="chainer")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=300, help="timed iterations")
    parser.add_argument("--warmup", type=int, default=30, help="untimed iterations first")
    parser.add_argument("--insize", type=int, default=224)
    parser.add_argument("--n-class", type=int, default=1000)
    parser.add_argument("--device", default="0", help="GPU number, or cpu")
    args = parser.parse_args(argv)
    for name in ("batch", "iterations", "insize", "n_class"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.insize < 32:
        parser.error("--insize must be at least 32 (ResNet-50 halves it five times)")
    images_per_s, what = (chainer_steps if args.framework == "chainer" else torch_steps)(args)
    print(json.dumps({"framework": args.framework, "what": what, "batch": args.batch,
                      "insize": args.insize, "iterations": args.iterations,
                      "warmup": args.warmup, "images_per_s": round(images_per_s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
