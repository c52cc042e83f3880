"""``chainermn-rt data pack SRC OUT``: a class-folder tree or ``PATH LABEL`` list of images into
tar shards (``shards``' layout) with a ``manifest.json``.

Samples are shuffled (``seed``) and dealt into shards of ``shard_size`` (the pack's
:class:`Layout`), which worker threads build in parallel under ``OUT/.partial/``; a shard
finished there is kept, so running the same command again after an interruption resumes. Only
when every shard is done do they move into ``OUT`` and the manifest is written, last: a folder
with a manifest is complete. (Not ``files.whole_folder``'s one rename of a new folder: the work
must outlive an interrupted run where the next run finds it, in ``OUT`` itself, and ``OUT`` may
be an empty folder someone made in a folder the packer cannot write to.)

JPEGs are stored as they are (checked from their markers, not decoded: packing runs at the
speed of ``tar``), unless ``short_side`` asks for smaller images or they are CMYK; other
formats (PNG, 16-bit PNG, ...) are converted to RGB JPEGs. A file that cannot be used (empty,
not an image, truncated, too many pixels, a duplicate key, a bad label) is skipped and listed
in ``OUT/skipped.txt`` and on stderr, one line each; with ``strict`` the pack stops instead,
exit status 2, and leaves nothing.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
import queue
import random
import shutil
import stat
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chainermn_rt.data import jpeg
from chainermn_rt.data import manifest as manifest_
from chainermn_rt.data.cpus import default_workers
from chainermn_rt.data.shards import END, MAX_KEY_BYTES, member_parts
from chainermn_rt.data.sources import IMAGE_SUFFIXES, parse_list
from chainermn_rt.errors import UserError
from chainermn_rt.files import sha256_file, write_atomically

PARTIAL = ".partial"
LAYOUT = "plan"  # in PARTIAL: the digest of the layout being built (another one is refused)
SKIPPED = "skipped.txt"
MAX_FILE_BYTES = 256 << 20
JPEG_MAGIC = b"\xff\xd8\xff"


@dataclass(frozen=True)
class Options:
    shard_size: int = 1000
    short_side: int | None = None
    quality: int = 90
    seed: int = 0
    strict: bool = False
    classes: int | None = None  # list files: the class count (labels must be below it)
    root: str = ""  # list files: what their paths are relative to


@dataclass(frozen=True)
class Item:
    path: str
    label: int
    key: str


@dataclass
class Layout:
    """What goes into the shards, in shard order, and what is wrong already."""

    items: list[Item]
    classes: tuple[str, ...]
    problems: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


@dataclass(frozen=True)
class Result:
    manifest: manifest_.Manifest
    skipped: list[tuple[str, str]]
    resumed: int  # shards found done under .partial


def lay_out(src: str, options: Options) -> Layout:
    """The samples of ``src`` with their keys, in shard order, and what is wrong already."""
    path = Path(src)
    problems: list[tuple[str, str]] = []
    if path.is_dir():
        classes = sorted(p.name for p in path.iterdir() if p.is_dir())
        if not classes:
            raise UserError(f"SRC: {src!r} holds no class folders; allowed: a folder of class "
                            "folders (ROOT/<class>/<image>) or a list file of 'PATH LABEL' lines")
        pairs = []
        for label, name in enumerate(classes):
            files = sorted(f for f in (path / name).iterdir()
                           if f.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                problems.append((str(path / name), "class folder holds no images"))
            pairs += [(str(f), label, f"{name}/{f.stem}") for f in files]
    elif path.is_file():
        pairs = [(p, label, os.path.splitext(os.path.relpath(p, options.root or "."))[0])
                 for p, label in parse_list(src, options.root)]
        count = options.classes or max((lb for _, lb, _ in pairs), default=-1) + 1
        classes = [str(i) for i in range(count)]
    else:
        raise UserError(f"SRC: {src!r} does not exist; allowed: a folder of class folders or "
                        "a list file of 'PATH LABEL' lines")
    items, keys = [], set()
    for p, label, key in pairs:
        key = _clean_key(key)
        why = (f"label {label} is outside the {len(classes)} classes; allowed: 0-"
               f"{len(classes) - 1} (set --classes)" if label >= len(classes)
               else "its name holds a control character" if any(ord(c) < 32 for c in key)
               else f"its key is longer than {MAX_KEY_BYTES} bytes"
               if len(key.encode("utf-8", "surrogateescape")) > MAX_KEY_BYTES
               else f"duplicate key {key!r} (another file has the same name but its suffix)"
               if key in keys else None)
        if why:
            problems.append((p, why))
            continue
        keys.add(key)
        items.append(Item(p, label, key))
    random.Random(options.seed).shuffle(items)
    return Layout(items, tuple(classes), problems)


def _clean_key(key: str) -> str:
    """A key has no dot in its file name part (WebDataset: the first dot starts the
    extension) and no leading ``./`` or ``/``."""
    head, _, name = key.lstrip("./").rpartition("/")
    name = name.replace(".", "_")
    return f"{head}/{name}" if head else name


def check_image(data: bytes, options: Options) -> bytes:
    """What to store for the image file ``data``: itself or a converted JPEG; ValueError with
    the reason when it cannot be used."""
    if not data:
        raise ValueError("empty file")
    if data.startswith(JPEG_MAGIC):
        try:
            h = jpeg.header(data)
        except jpeg.DecodeError as err:
            raise ValueError(f"not a readable JPEG ({err})") from None
        if h.width * h.height > jpeg.MAX_PIXELS:
            raise ValueError(f"{h.width}x{h.height} pixels, more than {jpeg.MAX_PIXELS} (a "
                             "decompression bomb?)")
        if h.colorspace not in jpeg.DECODABLE:
            return _convert(data, options)  # CMYK, YCCK
        if options.short_side and min(h.width, h.height) > options.short_side:
            return _smaller(data, h.width, h.height, options)
        if not data.rstrip(b"\0\r\n ").endswith(b"\xff\xd9"):  # no end marker: cut short?
            try:
                jpeg.decode(data)
            except jpeg.DecodeError as err:
                raise ValueError(str(err)) from None
        return data
    return _convert(data, options)


def _smaller(data: bytes, width: int, height: int, options: Options) -> bytes:
    scale = options.short_side / min(width, height)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    try:
        pixels = jpeg.decode(data, size)
    except jpeg.DecodeError as err:
        raise ValueError(str(err)) from None
    return _encode(pixels, options)


def _encode(pixels, options: Options) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=options.quality)
    return out.getvalue()


def _convert(data: bytes, options: Options) -> bytes:
    """Any image Pillow reads, as an RGB JPEG (at the short side asked for)."""
    import numpy
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = jpeg.MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                if image.width * image.height > jpeg.MAX_PIXELS:
                    raise ValueError(f"{image.width}x{image.height} pixels, more than "
                                     f"{jpeg.MAX_PIXELS} (a decompression bomb?)")
                image.load()
                if image.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey
                    wide = numpy.asarray(image, numpy.uint32)
                    image = Image.fromarray((wide >> 8).astype(numpy.uint8))
                rgb = image.convert("RGB")
    except (OSError, SyntaxError, Image.DecompressionBombError,
            Image.DecompressionBombWarning, ValueError) as err:
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"not a usable image ({what})") from None
    if options.short_side and min(rgb.size) > options.short_side:
        scale = options.short_side / min(rgb.size)
        rgb = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))),
                         Image.BILINEAR)
    return _encode(numpy.asarray(rgb), options)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
        # one read takes a regular file whole (Linux reads up to 2 GiB at once); a file that
        # grows meanwhile is cut where it was
        return os.read(fd, info.st_size)
    finally:
        os.close(fd)


def build_shard(task: tuple[int, list[Item], str, Options]) -> dict:
    """Write shard ``index`` of ``items`` into ``partial``; its record (also saved there)."""
    index, items, partial, options = task
    name = manifest_.shard_name(index)
    path = os.path.join(partial, name)
    count, problems = 0, []
    with open(path + ".tmp", "wb") as f:
        out = _HashingWriter(f)
        try:
            for item in items:
                try:
                    data = check_image(_read(item.path), options)
                except (OSError, ValueError) as err:
                    why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                    problems.append((item.path, why))
                    continue
                out.write(*member_parts(f"{item.key}.jpg", data),
                          *member_parts(f"{item.key}.cls", str(item.label).encode()))
                count += 1
            out.write(END)
        finally:
            out.close()
    record = {"index": index, "name": name, "count": count, "bytes": out.size,
              "sha256": out.digest.hexdigest(), "problems": problems}
    if count:
        os.replace(path + ".tmp", path)
    else:
        os.unlink(path + ".tmp")
    write_atomically(Path(path + ".json"), lambda f: json.dump(record, f))
    return record


class _HashingWriter:
    """Writes chunks to ``f`` and hashes them (sha256), each on a thread of its own: both
    release the GIL, so they overlap each other and the reading of the next image. Chunks go
    to the threads in batches of about ``BATCH`` bytes: a hand-off per image costs more in
    locks and GIL switches than the hashing it hands off."""

    BATCH = 4 << 20

    def __init__(self, f):
        self.f, self.digest, self.size, self.error = f, hashlib.sha256(), 0, None
        self.batch: list[bytes] = []
        self.batched = 0
        self.queues: tuple[queue.Queue, queue.Queue] = (queue.Queue(4), queue.Queue(4))
        self.threads = [threading.Thread(target=self._run, args=(q, work), daemon=True,
                                         name=f"pack-{name}")
                        for q, work, name in zip(self.queues, (self._write, self.digest.update),
                                                 ("writer", "hasher"), strict=True)]
        for thread in self.threads:
            thread.start()

    def write(self, *chunks: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.batch += chunks
        self.batched += sum(map(len, chunks))
        if self.batched >= self.BATCH:
            self._hand_off()

    def _hand_off(self) -> None:
        batch, self.batch, self.batched = self.batch, [], 0
        for q in self.queues:
            q.put(batch)

    def close(self) -> None:
        if self.batch:
            self._hand_off()
        for q in self.queues:
            q.put(None)
        for thread in self.threads:
            thread.join()
        if self.error is not None:
            raise self.error

    def _write(self, chunk: bytes) -> None:
        self.f.write(chunk)
        self.size += len(chunk)

    def _run(self, q: queue.Queue, work) -> None:
        while (chunks := q.get()) is not None:
            if self.error is not None:
                continue  # drain: the pack stops at the next write() or close()
            try:
                for chunk in chunks:
                    work(chunk)
            except OSError as err:
                self.error = err


def _done_before(partial: Path, index: int) -> dict | None:
    """The record of a shard an earlier run finished, if its file is whole."""
    name = manifest_.shard_name(index)
    try:
        record = json.loads((partial / f"{name}.json").read_text())
        if record["count"] and sha256_file(partial / name) != record["sha256"]:
            return None
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _layout_digest(src: str, layout: Layout, options: Options) -> str:
    digest = hashlib.sha256(json.dumps([os.path.abspath(src), vars(options),
                                        layout.classes]).encode())
    for item in layout.items:
        digest.update(f"{item.path}\0{item.label}\0{item.key}\n".encode("utf-8",
                                                                       "surrogateescape"))
    return digest.hexdigest()


def pack(src: str, out: str, options: Options, workers: int = 1,
         progress: Callable[[int, int], None] | None = None,
         report: Callable[[str, str], None] | None = None) -> Result:
    """Pack ``src`` into the shard folder ``out`` (see the module's docstring).
    ``progress(done, total)`` as samples are done; ``report(path, why)`` for each file
    skipped."""
    out_path = Path(out)
    if (out_path / manifest_.NAME).exists():
        raise UserError(f"OUT: {out} already holds a packed data set; allowed: a new or empty "
                        "folder (or an interrupted pack of the same SRC, which resumes)")
    if out_path.exists() and (not out_path.is_dir() or any(
            p.name != PARTIAL for p in out_path.iterdir())):
        raise UserError(f"OUT: {out} is not an empty folder; allowed: a new or empty folder")
    layout = lay_out(src, options)
    if not layout.items:
        raise UserError(f"SRC: {src!r} holds no usable images")
    created = not out_path.exists()
    partial = out_path / PARTIAL
    partial.mkdir(parents=True, exist_ok=True)
    digest = _layout_digest(src, layout, options)
    layout_file = partial / LAYOUT
    if layout_file.exists() and layout_file.read_text().strip() != digest:
        raise UserError(f"OUT: {out} holds an interrupted pack of other data or options; "
                        "allowed: the same SRC and options (to resume), or an empty folder")
    write_atomically(layout_file, lambda f: f.write(digest + "\n"))

    n, total, done = options.shard_size, len(layout.items), 0
    chunks = [layout.items[i:i + n] for i in range(0, len(layout.items), n)]
    records, todo = {}, []
    for index, items in enumerate(chunks):
        record = _done_before(partial, index)
        if record is None:
            todo.append((index, items, str(partial), options))
        else:
            records[index] = record
            done += len(items)
    if progress:
        progress(done, total)
    resumed = len(records)
    problems = list(layout.problems)
    if report:
        for path, why in problems:
            report(path, why)
    failed = options.strict and bool(problems)
    if todo and not failed:
        for record in _run(todo, workers):
            records[record["index"]] = record
            done += len(chunks[record["index"]])
            if progress:
                progress(done, total)
            for path, why in record["problems"]:
                problems.append((path, why))
                if report:
                    report(path, why)
    if options.strict and problems:
        shutil.rmtree(out_path if created else partial)
        raise UserError(f"SRC: {len(problems)} file(s) cannot be packed (listed above); "
                        "allowed: without --strict they are skipped and listed")
    return _finish(out_path, partial, layout, records, problems, options, resumed)


def default_builders(options: Options) -> int:
    """Shards built at once: one per CPU when images are re-encoded (the codecs keep a core
    busy), else one per two CPUs (a shard's reading, hashing and writing threads keep about two
    busy: measured, two at once on 2 CPUs pack 0.75x tar's rate, one 0.87x; bench/RESULTS.md)."""
    return default_workers(each=1 if options.short_side else 2, least=1)


def _run(todo: list, workers: int):
    """Build the shards of ``todo``, ``workers`` at a time, as each finishes. Threads, not
    processes: reading, writing, hashing and the codecs release the GIL, and a process pool
    would import the calling program again (a script without a ``__main__`` guard, stdin)."""
    if workers <= 1 or len(todo) == 1:
        yield from map(build_shard, todo)
        return
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(todo)),
                                               thread_name_prefix="pack") as pool:
        futures = [pool.submit(build_shard, task) for task in todo]
        try:
            for future in concurrent.futures.as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def _finish(out_path: Path, partial: Path, layout: Layout, records: dict, problems,
            options: Options, resumed: int) -> Result:
    shards = []
    for index in sorted(records):
        r = records[index]
        if r["count"]:
            os.replace(partial / r["name"], out_path / r["name"])
            shards.append(manifest_.Shard(r["name"], r["count"], r["bytes"], r["sha256"]))
    m = manifest_.Manifest(layout.classes, options.short_side, tuple(shards))
    if problems:
        write_atomically(out_path / SKIPPED,
                         lambda f: f.writelines(f"{path}\t{why}\n" for path, why in problems))
    write_atomically(out_path / manifest_.NAME, lambda f: f.write(manifest_.to_json(m)))
    shutil.rmtree(partial)
    return Result(m, problems, resumed)

