"""Staging's copy step (``chainermn-rt data stage``): a folder copied to node-local storage,
whole or not at all.

A folder of shards (it holds ``manifest.json``) is copied as the manifest lists it: exactly its
shards and the manifest, each shard's size and sha256 checked while it is copied (one read of
the shared file system). Any other folder is copied as it is (files, folders, symbolic links).
The copy is made in a temporary sibling of DEST and renamed into place, so DEST is complete or
absent; a DEST already complete (the same node staged twice) is left alone.

>>> import tempfile
>>> top = Path(tempfile.mkdtemp())
>>> (top / "src" / "a").mkdir(parents=True)
>>> _ = (top / "src" / "a" / "x.txt").write_text("data")
>>> copy_folder(top / "src", top / "dest").files, (top / "dest" / "a" / "x.txt").read_text()
(1, 'data')
>>> copy_folder(top / "src", top / "dest").already
True

In a job (:func:`copy_step`, ``data stage --job``) the sources and the node-local folder come
from the job script's variables (chainermn_rt.staging); first the folders that jobs Slurm no
longer lists left in the same local_scratch are removed (:func:`sweep`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.data import manifest as manifests
from chainermn_rt.errors import EnvironmentProblem, UserError
from chainermn_rt.files import whole_folder
from chainermn_rt.staging import STAGE_LIVE_JOBS_VAR, job_of, staged_job

BUFFER = 1 << 20  # read, hash and write in 1 MiB pieces: it stays in the core's cache
MAX_WORKERS = 4  # files copied at once (sha256 runs without the GIL)
# A stage folder changed this recently is never swept: its job may have started after Slurm
# listed the user's jobs (the copy step starts seconds after the list is made).
STALE_AFTER_S = 600
_PARTIAL = ".partial-"


@dataclass(frozen=True)
class Copied:
    files: int
    bytes: int
    seconds: float
    already: bool = False  # DEST was complete: nothing copied

    def __str__(self) -> str:
        if self.already:
            return "complete already, left alone"
        rate = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        return (f"{self.files} file{'s' if self.files != 1 else ''}, "
                f"{self.bytes / 1e6:.1f} MB in {self.seconds:.2f} s ({rate:.0f} MB/s)")


@dataclass(frozen=True, slots=True)
class _Item:
    """One thing to copy: ``rel`` below the source; a shard carries its manifest entry."""

    rel: str
    kind: str  # "file", "dir", "link"
    size: int = 0
    shard: manifests.Shard | None = None


def copy_folder(src: Path, dest: Path, replace_incomplete: bool = False) -> Copied:
    """Copy the folder ``src`` to ``dest`` whole or not at all. A ``dest`` that is already a
    complete copy is left alone; an incomplete one is a UserError, or is replaced when
    ``replace_incomplete`` (a job's own stage folder). UserError (exit 2) for a bad source (a
    damaged or missing shard: one line naming it), EnvironmentProblem (3) when ``dest``'s file
    system cannot take it; either way nothing is left at ``dest``."""
    src, dest = Path(src), Path(dest)
    _check_folder(src, "SRC")
    manifest = manifests.load(src, "SRC") if (src / manifests.NAME).exists() else None
    if os.path.lexists(dest):
        if _complete(dest, manifest):
            return Copied(0, 0, 0.0, already=True)
        if not replace_incomplete:
            raise UserError(f"DEST: {dest} exists and is not a complete copy of {src}; allowed: "
                            "a path that does not exist yet (its folder must)")
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        else:
            dest.unlink()
    _check_folder(dest.parent, "DEST's folder")
    items = _shard_items(manifest) if manifest else _tree_items(src)
    needed = sum(i.size for i in items)
    free = shutil.disk_usage(dest.parent).free
    if needed > free:
        raise EnvironmentProblem(f"{dest.parent}: {free / 1e9:.2f} GB free on "
                                 f"{socket.gethostname()}, {src} needs {needed / 1e9:.2f} GB")
    started = time.monotonic()
    try:
        with whole_folder(dest, mark=_PARTIAL) as tmp:
            _copy_all(src, tmp, items)
            if manifest is not None:  # last, and only the manifest that was checked
                _copy_file(src / manifests.NAME, tmp / manifests.NAME,
                           memoryview(bytearray(BUFFER)))
                if manifests.load(tmp, "SRC") != manifest:
                    raise UserError(f"SRC: {src / manifests.NAME} changed while it was "
                                    "staged; allowed: a folder no one writes to (stage it "
                                    "again)")
    except OSError as err:  # making the hidden folder, or renaming it into place
        if _complete(dest, manifest):  # another stager of the same node finished first
            return Copied(0, 0, 0.0, already=True)
        raise _write_error(dest.parent, err) from None
    return Copied(len([i for i in items if i.kind == "file"]) + (manifest is not None),
                  needed, time.monotonic() - started)


def _check_folder(path: Path, what: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise UserError(f"{what}: {path}: {err.strerror.lower()}; allowed: a readable "
                        "folder") from None
    if not stat.S_ISDIR(mode):
        raise UserError(f"{what}: {path} is not a folder; allowed: a folder")


def _complete(dest: Path, manifest: manifests.Manifest | None) -> bool:
    """A staged copy: a real folder; of shards, with the same manifest and each shard's size."""
    if dest.is_symlink() or not dest.is_dir():
        return False
    if manifest is None:
        return True
    try:
        if manifests.load(dest) != manifest:
            return False
        return all((dest / s.name).stat().st_size == s.bytes for s in manifest.shards)
    except (UserError, OSError):
        return False


def _shard_items(manifest: manifests.Manifest) -> list[_Item]:
    return [_Item(s.name, "file", s.bytes, s) for s in manifest.shards]


def _tree_items(src: Path) -> list[_Item]:
    """Every folder, file and symbolic link below ``src``, parents before children."""
    items, folders = [], [""]
    while folders:
        rel_folder = folders.pop()
        try:
            with os.scandir(src / rel_folder if rel_folder else src) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            _walk_error(err)
        for entry in entries:
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as err:
                _walk_error(err)
            if stat.S_ISLNK(info.st_mode):
                items.append(_Item(rel, "link"))
            elif stat.S_ISDIR(info.st_mode):
                items.append(_Item(rel, "dir"))
                folders.append(rel)
            elif stat.S_ISREG(info.st_mode):
                items.append(_Item(rel, "file", info.st_size))
            else:
                raise UserError(f"SRC: {entry.path} is neither a file, a folder nor a symbolic "
                                "link; allowed: a folder of those")
    return items


def _walk_error(err: OSError) -> None:
    raise UserError(f"SRC: {err.filename}: {err.strerror.lower()}; allowed: a readable "
                    "folder") from None


def _copy_all(src: Path, tmp: Path, items: list[_Item]) -> None:
    """Folders and links first, then the files by up to MAX_WORKERS threads (each with its
    own buffer), taking the next file as they finish one; the first error stops the others
    and is raised."""
    for item in items:
        try:
            if item.kind == "dir":
                (tmp / item.rel).mkdir()
            elif item.kind == "link":
                os.symlink(os.readlink(src / item.rel), tmp / item.rel)
        except OSError as err:
            raise _write_error(tmp / item.rel, err) from None
    files = iter([i for i in items if i.kind == "file"])
    count = sum(1 for i in items if i.kind == "file")
    lock, stop, errors = threading.Lock(), threading.Event(), []

    def worker() -> None:
        view = memoryview(bytearray(BUFFER))
        while not stop.is_set():
            with lock:
                item = next(files, None)
            if item is None:
                return
            try:
                _copy_file(src / item.rel, tmp / item.rel, view, item.shard, stop)
            except BaseException as err:  # raised again by the caller
                errors.append(err)
                stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(
        max(1, min(MAX_WORKERS, count, len(os.sched_getaffinity(0)) * 2)))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: stop the threads before the partial copy is removed
        stop.set()
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]


def _copy_file(src: Path, dest: Path, view: memoryview, shard: manifests.Shard | None = None,
               stop: threading.Event | None = None) -> None:
    """Copy one file in pieces of ``view``'s size; for a shard, check its size and sha256 on
    the way."""
    digest = hashlib.sha256() if shard else None
    limit = shard.bytes + 1 if shard else None  # reading one byte more finds a long file
    total = 0
    with _open_source(src, shard) as fin, _open_dest(dest) as fout:
        os.posix_fadvise(fin.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        if shard is None and _sent(fin, fout, src, dest):  # the kernel copies it
            os.chmod(dest, stat.S_IMODE(os.fstat(fin.fileno()).st_mode) | stat.S_IRUSR)
            return
        while limit is None or total < limit:
            if stop is not None and stop.is_set():
                return
            try:
                n = fin.readinto(view if limit is None else view[:limit - total])
            except OSError as err:
                raise UserError(f"SRC: {src}: {err.strerror.lower()}; allowed: a readable "
                                "file") from None
            if not n:
                break
            if digest is not None:
                digest.update(view[:n])
            _write_all(fout, view[:n], dest)
            total += n
        os.chmod(dest, stat.S_IMODE(os.fstat(fin.fileno()).st_mode) | stat.S_IRUSR)
    if shard is None:
        return
    if total != shard.bytes:
        size = f"more than {shard.bytes}" if total > shard.bytes else str(total)
        raise UserError(f"SRC: {src}: {size} bytes, but manifest.json says {shard.bytes}; "
                        "allowed: the shard as `data pack` wrote it (pack or copy it again)")
    if digest.hexdigest() != shard.sha256:
        raise UserError(f"SRC: {src}: sha256 {digest.hexdigest()}, but manifest.json says "
                        f"{shard.sha256}; allowed: the shard as `data pack` wrote it (pack or "
                        "copy it again)")


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _sent(fin, fout, src: Path, dest: Path) -> bool:
    """Copy ``fin`` to ``fout`` with sendfile(2); False when the file systems do not allow it
    (nothing was copied then)."""
    sent = 0
    while True:
        try:
            n = os.sendfile(fout.fileno(), fin.fileno(), None, 1 << 30)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOSYS) and sent == 0:
                return False
            if err.errno in _WRITE_ERRNOS:
                raise _write_error(dest, err) from None
            raise UserError(f"SRC: {src}: {err.strerror.lower()}; allowed: a readable "
                            "file") from None
        if n == 0:
            return True
        sent += n


def _open_source(src: Path, shard: manifests.Shard | None):
    try:
        return open(src, "rb", buffering=0)
    except FileNotFoundError:
        what = "missing; allowed: every shard manifest.json lists" if shard else \
            "vanished while it was staged; allowed: a folder no one writes to"
        raise UserError(f"SRC: {src}: {what}") from None
    except OSError as err:
        raise UserError(f"SRC: {src}: {err.strerror.lower()}; allowed: a readable "
                        "file") from None


def _open_dest(dest: Path):
    try:
        return open(dest, "xb", buffering=0)
    except OSError as err:
        raise _write_error(dest, err) from None


def _write_all(fout, data: memoryview, dest: Path) -> None:
    while data:
        try:
            n = fout.write(data)
        except OSError as err:
            raise _write_error(dest, err) from None
        data = data[n:]


def _write_error(dest: Path, err: OSError) -> EnvironmentProblem:
    return EnvironmentProblem(f"{dest}: {err.strerror.lower()} on {socket.gethostname()}; "
                              "the node-local folder cannot take the copy")


# -- in a job ------------------------------------------------------------------------------

def live_jobs(environ: Mapping[str, str]) -> set[str] | None:
    """The job ids the job script had Slurm list (STAGE_LIVE_JOBS_VAR); None when the list is
    unknown: empty, or without this job (Slurm did not answer)."""
    ids = set(environ.get(STAGE_LIVE_JOBS_VAR, "").split())
    own = environ.get("SLURM_JOB_ID", "")
    if not own or own not in ids or not all(i.isdigit() for i in ids):
        return None
    return ids


def sweep(scratch: Path, live: set[str] | None, own: str,
          now: float | None = None) -> list[str]:
    """Remove the stage folders in ``scratch`` of jobs not in ``live`` (nor ``own``), owned by
    this user and unchanged for STALE_AFTER_S; nothing when ``live`` is None. One line per
    folder, saying what was done."""
    if live is None:
        return []
    now = time.time() if now is None else now
    lines = []
    try:
        entries = list(os.scandir(scratch))
    except OSError:
        return []
    for entry in sorted(entries, key=lambda e: e.name):
        job = job_of(entry.name)
        if job is None or entry.name == own or job in live:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or \
                now - info.st_mtime < STALE_AFTER_S:
            continue
        if _remove(entry.path):
            lines.append(f"removed {entry.path}, left by job {job}, which Slurm no "
                         "longer lists")
        else:
            lines.append(f"could not remove all of {entry.path} (left by job {job})")
    return lines


def _remove(path: str) -> bool:
    """Remove the folder ``path``; False when some of it stays."""
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def own_folder(folder: Path) -> None:
    """Make the job's stage folder, private to the user (mode 0700), or accept the one an
    earlier run of the same job made; anything else there is refused."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise EnvironmentProblem(f"{folder} on {socket.gethostname()} is not a folder of "
                                     "this user's; the job's stage folder must be") from None
        for entry in os.scandir(folder):  # what a killed earlier run was copying
            if _PARTIAL in entry.name:
                shutil.rmtree(entry.path, ignore_errors=True)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{folder.parent} (local_scratch) does not exist on "
                                 f"{socket.gethostname()}; the site profile's local_scratch "
                                 "must be a folder on every node of the partition") from None


def copy_step(environ: Mapping[str, str] | None = None,
              say: Callable[[str], None] = print) -> None:
    """The job script's copy step on one node: sweep, then copy each staged folder to its
    place (staging.copy_of)."""
    env = os.environ if environ is None else environ
    job = staged_job(env)
    if job is None:
        raise UserError("--job: the job script's staging variables are not set; allowed: "
                        "--job in a job script rendered with --stage (else: SRC DEST)")
    folder = Path(job.folder)
    host = socket.gethostname()
    for line in sweep(folder.parent, live_jobs(env), folder.name):
        say(f"chainermn-rt data stage: {host}: {line}")
    own_folder(folder)
    for i, source in enumerate(job.sources):
        copied = copy_folder(Path(source), Path(job.copy(i)), replace_incomplete=True)
        say(f"chainermn-rt data stage: {host}: {source} -> {job.copy(i)}: {copied}")
