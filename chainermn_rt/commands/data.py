"""``chainermn-rt data ACTION``: training data at the paper's scale.

``data synth OUT`` writes an ImageNet-like tree of made-up JPEGs
(chainermn_rt.data.writers.synthetic). ``data pack SRC OUT`` turns a class-folder tree or a
``PATH LABEL`` list of images into tar shards with a manifest (chainermn_rt.data.writers.pack:
parallel, resumable, files it cannot use skipped and listed, or refused with ``--strict``).
``data stage SRC DEST`` copies the folder SRC (a folder of shards with ``manifest.json``: its
shards, checked; any other: as it is) to DEST, whole or not at all; a complete DEST is left
alone. ``data stage --job`` is a job script's copy step (``render --stage``): each staged
folder to this node's local_scratch (docs/staging.md). The work is in chainermn_rt.data.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from chainermn_rt.arguments import Parser, integer
from chainermn_rt.errors import UserError
from chainermn_rt.files import whole_folder


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    parser_class=Parser)
    synth = actions.add_parser(
        "synth", help="an ImageNet-like class-folder tree of made-up JPEGs, to try the data "
        "path without ImageNet")
    synth.add_argument("out", metavar="OUT", type=Path, help="the folder to write (new)")
    synth.add_argument("--classes", type=integer(1, 1000), default=10)
    synth.add_argument("--per-class", type=integer(1, 10**5), default=50)
    synth.add_argument("--first", type=integer(0, 10**9), default=0,
                       help="number of each class's first image: other numbers, other images "
                       "(e.g. a validation set)")
    pack = actions.add_parser(
        "pack", help="images (a class-folder tree or a PATH LABEL list) into tar shards with a "
        "manifest, for loaders that read each rank's own shards")
    pack.add_argument("src", metavar="SRC", help="ROOT/<class>/<image> tree, or a list file")
    pack.add_argument("out", metavar="OUT", type=Path,
                      help="the shard folder to write (new, empty, or an interrupted pack of "
                      "the same SRC: it resumes)")
    pack.add_argument("--shard-size", type=integer(1, 10**7), default=1000,
                      help="images per shard (default: %(default)s, ~100 MB of ImageNet)")
    pack.add_argument("--short-side", type=integer(16, 10**5),
                      help="re-encode images whose short side is longer to this short side "
                      "(e.g. 320: less to read and decode; default: keep them as they are)")
    pack.add_argument("--quality", type=integer(1, 100), default=90,
                      help="JPEG quality of re-encoded images (default: %(default)s)")
    pack.add_argument("--workers", type=integer(1, 1024), default=None,
                      help="shards built at once (default: the CPUs with --short-side, "
                      "else half of them)")
    pack.add_argument("--strict", action="store_true",
                      help="stop on the first pass's problems (exit 2, nothing written) "
                      "instead of skipping and listing the files")
    pack.add_argument("--classes", type=integer(1, 10**6),
                      help="list files: the number of classes (default: the largest label + 1)")
    pack.add_argument("--root", default="", help="list files: what their paths are below")
    pack.add_argument("--seed", type=integer(0), default=0,
                      help="the order of the samples in the shards (default: %(default)s)")
    stage = actions.add_parser(
        "stage", help="copy a folder to node-local storage whole or not at all, checking a "
        "shard folder's sha256 on the way (in a job: --job)")
    stage.add_argument("src", nargs="?", metavar="SRC", help="the folder to copy")
    stage.add_argument("dest", nargs="?", metavar="DEST",
                       help="where the copy goes (must not exist, unless a complete copy)")
    stage.add_argument("--job", action="store_true",
                       help="the job script's copy step: the staged folders and this node's "
                       "folder come from the job's variables (render --stage)")


def run(args: argparse.Namespace) -> int:
    return {"stage": _stage, "pack": _pack, "synth": _synth}[args.action](args)


def _synth(args: argparse.Namespace) -> int:
    from chainermn_rt.data.writers import synthetic

    if args.out.exists():
        raise UserError(f"OUT: {args.out} exists; allowed: a new folder")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with whole_folder(args.out) as work:
        files = synthetic.tree(work, args.classes, args.per_class, first=args.first)
    print(f"{args.out}: {len(files)} JPEGs in {args.classes} class folders")
    return 0


def _pack(args: argparse.Namespace) -> int:
    import sys

    from chainermn_rt.data.writers import pack
    from chainermn_rt.errors import print_line

    options = pack.Options(shard_size=args.shard_size, short_side=args.short_side,
                           quality=args.quality, seed=args.seed, strict=args.strict,
                           classes=args.classes, root=args.root)
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=total, unit="img", file=sys.stderr, dynamic_ncols=True)
        if bar is not None:
            bar.update(done - bar.n)

    def report(path: str, why: str) -> None:
        verb = "cannot pack" if args.strict else "skipped"
        print_line(f"chainermn-rt data pack: {verb} {path!r}: {why}")

    workers = args.workers or pack.default_builders(options)
    try:
        result = pack.pack(args.src, str(args.out), options, workers, progress, report)
    finally:
        if bar is not None:
            bar.close()
    m = result.manifest
    size = sum(s.bytes for s in m.shards)
    skipped = (f"; skipped {len(result.skipped)} file(s), listed in {args.out / pack.SKIPPED}"
               if result.skipped else "")
    resumed = f" (resumed: {result.resumed} shard(s) done before)" if result.resumed else ""
    print(f"{args.out}: {m.count} images of {len(m.classes)} classes in {len(m.shards)} "
          f"shard(s), {size / 1e6:.1f} MB{resumed}{skipped}")
    return 0


def _stage(args: argparse.Namespace) -> int:
    from chainermn_rt import stage_copy

    if args.job:
        if args.src or args.dest:
            raise UserError("--job: takes no SRC or DEST; allowed: --job alone, or SRC DEST")
        stage_copy.copy_step()
        return 0
    if not args.src or not args.dest:
        raise UserError("SRC DEST: missing; allowed: the folder to copy and where the copy "
                        "goes (or --job in a job script)")
    copied = stage_copy.copy_folder(Path(args.src), Path(args.dest))
    print(f"{args.src} -> {args.dest}: {copied}")
    return 0
