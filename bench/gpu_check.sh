#!/usr/bin/env bash
# The GPU checks of chainermn-rt, on a machine with a GPU, no network and its own Python
# (3.12, with CuPy, mpi4py and optionally PyTorch):
#
#   bench/gpu_check.sh WHEELS              # WHEELS: `make offline-wheels` (build/offline-wheels)
#   bench/gpu_check.sh WHEELS --dry-run    # print the steps, run nothing
#
# Run it from a copy of this checkout (the tests and examples come from it). It makes a venv
# over the machine's Python (--system-site-packages: its CuPy, NumPy, mpi4py and PyTorch),
# installs the patched chainer and chainermn_rt wheels built here with their pure-Python
# dependencies (no network), then runs:
#   1. the GPU-marked tests;
#   2. chainermn_rt.setup() on one rank, which must choose pure_nccl;
#   3. the chainer fix set's tests (the CuPy fixes among them);
#   4. examples/train_imagenet.py (ResNet-50, synthetic data) at each batch size: WARMUP and
#      WARMUP+ITERATIONS iterations, images/s from the difference (warm-up excluded);
#   5. bench/resnet50_gpu.py: the same training step in Chainer and, when PyTorch is
#      installed, PyTorch eager, warm-up excluded;
# and prints a summary with images/s. CuPy 14 has no cuDNN: Chainer's convolutions run
# without it there (the summary says which).
# Settings: PYTHON (python3), OUT (build/gpu-check), BATCHES ("64 128"), ITERATIONS (300),
# WARMUP (30). Exit status: 0 when every step passed, 1 otherwise, 2 for bad arguments.
# The helper functions below run through `step`, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -uo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
WHEELS=$1
DRY=0
if [ $# -ge 2 ]; then
    [ "$2" = --dry-run ] || { echo "gpu_check.sh: unknown option $2; allowed: --dry-run" >&2; exit 2; }
    DRY=1
fi
if ! ls "$WHEELS"/chainer-*.whl "$WHEELS"/chainermn_rt-*.whl >/dev/null 2>&1; then
    echo "gpu_check.sh: WHEELS=$WHEELS holds no chainer and chainermn_rt wheels (make offline-wheels)" >&2
    exit 2
fi
for var in ITERATIONS WARMUP; do
    value=${!var:-1}
    case $value in ''|*[!0-9]*) echo "gpu_check.sh: $var=$value must be a whole number" >&2; exit 2;; esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$REPO/build/gpu-check}
BATCHES=${BATCHES:-64 128}
ITERATIONS=${ITERATIONS:-300}
WARMUP=${WARMUP:-30}
VENV=$OUT/venv
PY=$VENV/bin/python
declare -a SUMMARY=()
FAILED=0

# step NAME COMMAND...: run (or, with --dry-run, print) one step and record its result
step() {
    local name=$1
    shift
    echo "== $name: $*"
    if [ "$DRY" = 1 ]; then
        SUMMARY+=("dry   $name")
        return 0
    fi
    if (cd "$REPO" && "$@"); then
        SUMMARY+=("ok    $name")
    else
        SUMMARY+=("FAIL  $name (exit $?)")
        FAILED=1
    fi
}

# throughput LOG: "IMAGES SECONDS" of train_imagenet.py's last line
throughput() { sed -n 's/^throughput: .* images\/s (\([0-9]*\) images in \([0-9.]*\) s.*/\1 \2/p' "$1"; }

# example_rate BATCH: images/s of examples/train_imagenet.py between WARMUP and WARMUP+ITERATIONS
example_rate() {
    local batch=$1 n short long
    for n in "$WARMUP" $((WARMUP + ITERATIONS)); do
        "$PY" examples/train_imagenet.py --synthetic --batchsize "$batch" --iterations "$n" \
            --log-every "$n" --no-progress --out "$OUT/resnet50-b$batch-i$n" \
            > "$OUT/resnet50-b$batch-i$n.log" 2>&1 || { cat "$OUT/resnet50-b$batch-i$n.log"; return 1; }
    done
    short=$(throughput "$OUT/resnet50-b$batch-i$WARMUP.log")
    long=$(throughput "$OUT/resnet50-b$batch-i$((WARMUP + ITERATIONS)).log")
    if [ -z "$short" ] || [ -z "$long" ]; then echo "no throughput line"; return 1; fi
    "$PY" -c 'import sys; b, n, s, l = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
print(f"chainer example, batch {b}: {b * n / (float(l[1]) - float(s[1])):.1f} images/s")' \
        "$batch" "$ITERATIONS" "$short" "$long" | tee -a "$OUT/rates.txt"
}

# bench FRAMEWORK BATCH: bench/resnet50_gpu.py, its images/s into rates.txt
bench() {
    "$PY" bench/resnet50_gpu.py --framework "$1" --batch "$2" --iterations "$ITERATIONS" \
        --warmup "$WARMUP" | tee -a "$OUT/rates.txt"
}

mkdir -p "$OUT"
: > "$OUT/rates.txt"
step "venv over $PYTHON with the wheels of $WHEELS" \
    sh -c "'$PYTHON' -m venv --system-site-packages '$VENV' && '$PY' -m pip install -q --no-index --no-deps '$WHEELS'/*.whl"
step "stack" "$PY" -c '
import cupy, chainer, chainermn_rt
print("cupy", cupy.__version__, "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "driver", cupy.cuda.runtime.driverGetVersion(), "devices", cupy.cuda.runtime.getDeviceCount())
print("device 0:", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
print("NCCL available:", cupy.cuda.nccl.available)
major = int(cupy.__version__.split(".")[0])
print("cuDNN:", "none: CuPy %d has no cuDNN, Chainer convolves without it" % major if major >= 14
      else "CuPy %d binds cuDNN 8" % major)
try:
    import torch
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
except ImportError:
    print("torch: not installed (the PyTorch comparison is skipped)")'
step "GPU-marked tests" "$PY" -m pytest -m gpu -ra -p no:cacheprovider tests
step "setup() on one rank chooses pure_nccl" "$PY" -c '
import chainermn_rt
comm, device = chainermn_rt.setup()
name = type(comm).__name__
print(name, device)
assert "PureNccl" in name, name'
step "chainer fix set (CuPy fixes included)" "$PY" -m pytest -ra -p no:cacheprovider tests/test_chainer_fixes.py
for batch in $BATCHES; do
    step "ResNet-50 example, batch $batch" example_rate "$batch"
    step "ResNet-50 step, Chainer, batch $batch" bench chainer "$batch"
    if [ "$DRY" = 1 ] || "$PY" -c 'import torch' 2>/dev/null; then
        step "ResNet-50 step, PyTorch eager, batch $batch" bench torch "$batch"
    else
        SUMMARY+=("n/a   ResNet-50 step, PyTorch eager, batch $batch (no torch)")
    fi
done

echo
echo "== summary (images/s in $OUT/rates.txt)"
printf '%s\n' "${SUMMARY[@]}"
[ "$DRY" = 1 ] || cat "$OUT/rates.txt"
exit "$FAILED"
