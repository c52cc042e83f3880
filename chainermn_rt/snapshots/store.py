"""Snapshot sets on disk: one file per rank from one iteration, complete or absent.

A set lives in ``DIR/iter_<N>/`` (``N`` zero-padded to 9 digits)::

    iter_000000120/rank_00000.npz ... rank_<size-1>.npz
    iter_000000120/manifest.json     {"format": 1, "iteration": 120, "world_size": 4,
                                      "files": {"rank_00000.npz": "<sha256>", ...}}

It is written under ``DIR/.iter_<N>.tmp/`` and renamed into place only after every rank's file
and the manifest are on disk (each file: temporary name, ``fsync``, rename). A job killed while
writing leaves a hidden ``.tmp`` folder, never a partial ``iter_<N>``; the set before it stays
usable. :func:`check_set` says what is wrong with a set in one line naming the field.

>>> rank_file(3)
'rank_00003.npz'
>>> set_name(120), iteration_of("iter_000000120"), iteration_of(".iter_000000120.tmp")
('iter_000000120', 120, None)
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chainermn_rt.errors import UserError
from chainermn_rt.files import read_small, sha256_file, write_atomically

FORMAT = 1
MANIFEST = "manifest.json"
_SET = re.compile(r"iter_(\d{9})\Z")
_FIELDS = {"format": int, "iteration": int, "world_size": int, "files": dict}
_MAX_MANIFEST_BYTES = 1 << 20


class SnapshotError(UserError):
    """A snapshot set that cannot be used (one line: the path, the field, what is allowed)."""


def rank_file(rank: int) -> str:
    return f"rank_{rank:05d}.npz"


def set_name(iteration: int) -> str:
    return f"iter_{iteration:09d}"


def iteration_of(name: str) -> int | None:
    m = _SET.match(name)
    return int(m.group(1)) if m else None


def temp_dir(directory: Path, iteration: int) -> Path:
    return directory / f".{set_name(iteration)}.tmp"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """``data`` to ``path`` whole or not at all (:func:`chainermn_rt.files.write_atomically`)."""
    write_atomically(path, lambda f: f.write(data), binary=True)


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    import numpy  # here: importing chainermn_rt stays light for the per-rank step

    buffer = io.BytesIO()
    numpy.savez(buffer, **arrays)
    return buffer.getvalue()


def manifest(iteration: int, files: Mapping[str, str]) -> dict:
    return {"format": FORMAT, "iteration": iteration, "world_size": len(files),
            "files": dict(sorted(files.items()))}


def publish(directory: Path, iteration: int, files: Mapping[str, str]) -> Path:
    """Write the manifest into the temporary folder and rename it into place (rank 0 does this
    once every rank's file is there). Returns the set's folder."""
    tmp, final = temp_dir(directory, iteration), directory / set_name(iteration)
    write_file(tmp / MANIFEST, json.dumps(manifest(iteration, files), indent=1).encode())
    fsync_dir(tmp)
    if final.exists():  # the same iteration again (a rerun from an older set): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def _fail(path: Path, field: str, problem: str, allowed: str) -> SnapshotError:
    return SnapshotError(f"snapshot {path}: {field}: {problem}; allowed: {allowed}")


def read_manifest(path: Path) -> dict:
    """The set's manifest, checked field by field (:class:`SnapshotError` names the first bad
    one). Checks the files' presence, not their contents (see :func:`check_file`)."""
    where = path / MANIFEST
    try:
        data = json.loads(read_small(where, _MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise _fail(path, MANIFEST, "missing (an incomplete set)",
                    "a complete set written by chainermn_rt.resumable") from None
    except OSError as err:
        raise _fail(path, MANIFEST, f"unreadable ({err.strerror})",
                    "the manifest chainermn-rt wrote") from None
    except (ValueError, RecursionError) as err:  # not a file, too large, not JSON, too deep
        problem = str(err) if type(err) is ValueError and "JSON" not in str(err) else \
            f"not JSON ({type(err).__name__})"
        raise _fail(path, MANIFEST, problem, "the manifest chainermn-rt wrote") from None
    if not isinstance(data, dict):
        raise _fail(path, MANIFEST, "not a JSON object", "the manifest chainermn-rt wrote")
    for key in data:
        if key not in _FIELDS:
            raise _fail(path, repr(key)[:40], "unknown field", ", ".join(_FIELDS))
    for key, kind in _FIELDS.items():
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _fail(path, key, "missing" if value is None else f"{type(value).__name__}",
                        f"a JSON {'number' if kind is int else 'object'}")
    if data["format"] != FORMAT:
        raise _fail(path, "format", str(data["format"])[:20], str(FORMAT))
    if not 0 <= data["iteration"] < 10**9:
        raise _fail(path, "iteration", str(data["iteration"])[:20], "0-999999999")
    if iteration_of(path.name) not in (None, data["iteration"]):
        raise _fail(path, "iteration", f"{data['iteration']} in a folder named {path.name}",
                    "the folder's iteration")
    size = data["world_size"]
    if not 1 <= size <= 1 << 20:
        raise _fail(path, "world_size", str(size)[:20], "1-1048576")
    if len(data["files"]) != size or set(data["files"]) != {rank_file(r) for r in range(size)}:
        raise _fail(path, "files", f"{len(data['files'])} names for world_size {size}",
                    "rank_00000.npz ... one per rank")
    for name, digest in data["files"].items():
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise _fail(path, f"files.{name}", "not a sha256", "64 hexadecimal digits")
        try:
            mode = os.lstat(path / name).st_mode
        except FileNotFoundError:
            raise _fail(path, f"files.{name}", "missing", "every rank's file") from None
        if not stat.S_ISREG(mode):
            raise _fail(path, f"files.{name}", "not a regular file (a link, folder or device)",
                        "the file chainermn-rt wrote")
    return data


def check_file(path: Path, data: dict, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s arrays from the set, after checking its sha256 and that it is a plain
    ``.npz`` whose arrays fit in the file (:func:`npz_layout`)."""
    import numpy

    name = rank_file(rank)
    try:
        if sha256_file(path / name) != data["files"][name]:
            raise _fail(path, name, "its sha256 differs from the manifest's (damaged or "
                        "truncated)", "the file as written")
        npz_layout(path / name)
        with numpy.load(path / name, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as err:
        detail = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise _fail(path, name, f"not a valid .npz ({detail})", "an .npz file of arrays "
                    "written by chainermn_rt.resumable") from None


def npz_layout(file: Path) -> dict[str, tuple]:
    """Each array's name, shape and dtype as the file declares them, checked before anything is
    loaded: a zip of uncompressed ``.npy`` members, no object arrays, every array's bytes exactly
    its member's size and all members within the file (so loading needs no more memory than the
    file's size); ValueError (or zipfile.BadZipFile) naming what is wrong."""
    from numpy.lib import format as npy

    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    size, total, layout = os.stat(file).st_size, 0, {}
    with zipfile.ZipFile(file) as archive:
        for info in archive.infolist():
            key, member = info.filename[:-4], info.filename[:60]
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy") \
                    or key in layout:
                raise ValueError(f"member {member!r}: not one uncompressed .npy array")
            total += info.file_size
            if total > size:
                raise ValueError(f"member {member!r}: declares more bytes than the file holds")
            with archive.open(info) as f:
                version = npy.read_magic(f)
                if version not in readers:
                    raise ValueError(f"member {member!r}: .npy format {version}; allowed: "
                                     "1.0, 2.0")
                shape, _, dtype = readers[version](f)
                if dtype.hasobject:
                    raise ValueError(f"member {member!r}: object array (pickled data)")
                count = 1
                for n in shape:
                    count *= n
                if f.tell() + count * dtype.itemsize != info.file_size:
                    raise ValueError(f"member {member!r}: its header declares shape {shape} of "
                                     f"{dtype}, which is not the {info.file_size} bytes it holds")
            layout[key] = (shape, dtype)
    return layout


def manifest_for(path: Path, world_size: int | None = None) -> dict:
    """The manifest of the set at ``path``, written by ``world_size`` ranks when given."""
    path = Path(path)
    if not path.is_dir():
        raise _fail(path, "folder", "missing", "a snapshot folder such as result/snapshots/"
                    "iter_000000100")
    data = read_manifest(path)
    if world_size is not None and data["world_size"] != world_size:
        raise _fail(path, "world_size", f"written by {data['world_size']} ranks, this job has "
                    f"{world_size}", "the same number of ranks")
    return data


def check_set(path: Path, world_size: int | None = None) -> dict:
    """The manifest of a usable set, every rank's file read; :class:`SnapshotError` otherwise."""
    data = manifest_for(path, world_size)
    # ranks' files may hold other arrays (rank 0's extensions): each is checked on its own
    for rank in range(data["world_size"]):
        check_file(path, data, rank)
    return data


def complete_sets(directory: Path) -> list[Path]:
    """The folders named like complete sets, newest iteration first (not yet checked)."""
    if not Path(directory).is_dir():
        return []
    found = [(n, p) for p in Path(directory).iterdir()
             if p.is_dir() and (n := iteration_of(p.name)) is not None]
    return [p for _, p in sorted(found, reverse=True)]


def prune(directory: Path, keep: int) -> list[Path]:
    """Remove complete sets beyond the ``keep`` newest, and temporary folders left by writes
    that never finished (called between writes); returns what was removed."""
    removed = complete_sets(directory)[keep:]
    removed += [p for p in Path(directory).glob(".iter_*.tmp") if p.is_dir()]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed
