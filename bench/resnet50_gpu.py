"""ResNet-50 training steps on one device, Chainer (CuPy) or PyTorch eager: images/s after warm-up.

The same work in both: ResNet-50 v1.5 (stride in the 3x3 convolutions), the same synthetic
float32 images and labels (:func:`synthetic`, made once and sent to the device), forward,
softmax cross-entropy, backward, momentum SGD, in full float32 (TF32 off in both: CuPy's
default, PyTorch's set here); ``--warmup`` iterations first (kernel compilation, cuDNN
autotuning, memory pools), then ``--iterations`` timed between two device synchronisations.
Prints one JSON line. tests/gpu_check.py runs it on a GPU; ``--device cpu`` runs it on NumPy
or PyTorch's CPU (a smoke test, with a small ``--insize``).

    python bench/resnet50_gpu.py --framework chainer --batch 64
    python bench/resnet50_gpu.py --framework torch --batch 128
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def synthetic(args):
    """``(images, labels)``: NumPy arrays from a fixed seed, the same for both frameworks."""
    import numpy

    rng = numpy.random.default_rng(0)
    images = rng.standard_normal((args.batch, 3, args.insize, args.insize), dtype=numpy.float32)
    return images, rng.integers(0, args.n_class, args.batch).astype(numpy.int32)


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
    images, labels = synthetic(args)
    x, t = xp.asarray(images), xp.asarray(labels)

    def step():
        model.cleargrads()
        loss = model(x, t)
        loss.backward()
        optimizer.update()

    def sync():
        if xp is not numpy:
            xp.cuda.Device().synchronize()

    what = f"chainer {chainer.__version__} on NumPy"
    if xp is not numpy:
        cudnn = "with cuDNN" if chainer.should_use_cudnn(">=auto") else "without cuDNN"
        tf32 = "on" if os.environ.get("CUPY_TF32", "0") != "0" else "off"
        what = (f"chainer {chainer.__version__}, CuPy {xp.__version__} {cudnn}, "
                f"TF32 {tf32}")
    return _timed(step, sync, args), what


def torch_steps(args) -> tuple[float, str]:
    import torch

    try:
        from torchvision.models import resnet50
        model, source = resnet50(num_classes=args.n_class), "torchvision"
    except ImportError:
        model, source = _torch_resnet50(torch, args.n_class), "bench/resnet50_gpu.py"
    device = torch.device("cpu" if args.device == "cpu" else f"cuda:{args.device}")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # full float32, as CuPy by default
    torch.backends.cudnn.allow_tf32 = False
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = synthetic(args)
    x, t = torch.from_numpy(images).to(device), torch.from_numpy(labels).long().to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), t).backward()
        optimizer.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    cudnn = f"cuDNN {torch.backends.cudnn.version()}" if device.type == "cuda" else "CPU"
    return _timed(step, sync, args), (f"torch {torch.__version__} eager ({source} ResNet-50), "
                                      f"{cudnn}, TF32 off")


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


def _device(text: str) -> str:
    if text != "cpu" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: cpu or a GPU number")
    return text


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from chainermn_rt.arguments import Parser, integer

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("chainer", "torch"), default="chainer")
    parser.add_argument("--batch", type=integer(1), default=64)
    parser.add_argument("--iterations", type=integer(1), default=300, help="timed iterations")
    parser.add_argument("--warmup", type=integer(0), default=30,
                        help="untimed iterations first")
    # ResNet-50 halves its input five times
    parser.add_argument("--insize", type=integer(32, 4096), default=224)
    parser.add_argument("--n-class", type=integer(1, 1 << 20), default=1000)
    parser.add_argument("--device", type=_device, default="0", help="GPU number, or cpu")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    images_per_s, what = (chainer_steps if args.framework == "chainer" else torch_steps)(args)
    print(json.dumps({"framework": args.framework, "what": what, "batch": args.batch,
                      "insize": args.insize, "iterations": args.iterations,
                      "warmup": args.warmup, "images_per_s": round(images_per_s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
