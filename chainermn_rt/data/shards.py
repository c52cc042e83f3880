"""Tar shards in WebDataset's layout: one sample is consecutive members ``<key>.jpg`` (the
image) and ``<key>.cls`` (its label, decimal text); the key is the member's path up to the
first dot of its file name. Written as plain ustar with fixed metadata (the same samples give
the same bytes), read member by member without the tarfile module's per-member cost.

>>> import io
>>> shard = member("a/x1.jpg", b"JPEG") + member("a/x1.cls", b"7") + END
>>> len(shard) % 512, list(read(io.BytesIO(shard), "s.tar"))
(0, [Sample(key='a/x1', data=b'JPEG', label=7, shard='s.tar', file=None)])
>>> list(read(io.BytesIO(shard[:514]), "s.tar"))
Traceback (most recent call last):
chainermn_rt.data.shards.DataError: s.tar: cut short in member 'a/x1.jpg' (at byte 514)
"""

from __future__ import annotations

import itertools
import os
import re
import weakref
from collections.abc import Iterator
from typing import IO, NamedTuple

from chainermn_rt.errors import UserError

BLOCK = 512
END = bytes(2 * BLOCK)
IMAGE_EXTENSIONS = ("jpg", "jpeg")
MAX_KEY_BYTES = 200  # ustar's name and prefix fields hold 255
_MEMBER = re.compile(r"((?:.*/)?[^./][^/]*?)\.([^/]*)\Z", re.S)  # key, extension


class DataError(UserError):
    """Damaged or unusable training data: one line naming the file (and the sample's key)."""


class Sample(NamedTuple):
    key: str
    data: bytes | Span  # the encoded image, or where it lies in ``file``
    label: int
    shard: str  # where it came from: the shard's (or the image file's) path
    file: ShardFile | None = None

    def image(self) -> bytes:
        return self.file.read(self.data, self.key) if self.file is not None else self.data


def split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name, or None when it has no extension.

    >>> split_name("n014/n014_100.jpg"), split_name("a.b/c.tar.gz"), split_name("noext")
    (('n014/n014_100', 'jpg'), ('a.b/c', 'tar.gz'), None)
    """
    m = _MEMBER.match(name)
    return (m.group(1), m.group(2)) if m else None


def member(name: str, data: bytes) -> bytes:
    """One ustar member: header, ``data``, padding to a whole block (mode 0644, owner 0,
    time 0: the bytes depend on the name and data alone)."""
    return b"".join(member_parts(name, data))


def member_parts(name: str, data: bytes) -> tuple[bytes, bytes, bytes]:
    """:func:`member` as (header, data, padding): written one after the other, not joined."""
    raw = name.encode("utf-8", "surrogateescape")
    prefix = b""
    if len(raw) > 100:  # ustar: prefix (155) + "/" + name (100)
        cut = raw.rfind(b"/", 0, 156)
        if cut < 0 or len(raw) - cut - 1 > 100 or len(raw) > MAX_KEY_BYTES + 16:
            raise ValueError(f"member name {name!r} is too long for ustar")
        prefix, raw = raw[:cut], raw[cut + 1:]
    header = bytearray(BLOCK)
    header[0:len(raw)] = raw
    header[100:108] = b"0000644\0"
    header[108:116] = b"0000000\0"
    header[116:124] = b"0000000\0"
    header[124:136] = b"%011o\0" % len(data)
    header[136:148] = b"00000000000\0"
    header[148:156] = b" " * 8
    header[156:157] = b"0"
    header[257:265] = b"ustar\x0000"
    header[345:345 + len(prefix)] = prefix
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header), data, bytes(-len(data) % BLOCK)


def _number(field: bytes) -> int:
    if field[:1] == b"\x80":  # GNU base-256
        return int.from_bytes(field[1:], "big")
    return int(field.strip(b"\0 ") or b"0", 8)


class Span(NamedTuple):
    """Where a member's data lies in its shard file (read later, by whoever decodes it)."""

    offset: int
    size: int


def _members(f: IO[bytes], where: str, lazy: bool = False
             ) -> Iterator[tuple[str, bytes | Span]]:
    """(name, data) of each regular file member of the tar stream ``f``; with ``lazy``, images
    are skipped over and given as their :class:`Span`."""
    offset, long_name = 0, None
    end = f.seek(0, 2) if lazy else None
    if lazy:
        f.seek(0)
    while True:
        header = f.read(BLOCK)
        if len(header) < BLOCK:
            if not header:
                return  # no end blocks: a stream cut at a member's edge still ends cleanly
            raise DataError(f"{where}: cut short in a member's header (at byte {offset})")
        offset += BLOCK
        if header == bytes(BLOCK):
            return
        try:
            checksum = _number(header[148:156])
            size = _number(header[124:136])
        except ValueError:
            checksum = size = -1
        if checksum != sum(header[:148]) + 256 + sum(header[156:]) or size < 0:
            raise DataError(f"{where}: not a tar header at byte {offset - BLOCK} (damaged "
                            "shard)")
        kind = header[156:157]
        name = (header[345:500].rstrip(b"\0") + b"/" if header[345] else b"") \
            + header[:100].split(b"\0", 1)[0]
        shown = (long_name or name).decode("utf-8", "surrogateescape")
        pad = -size % BLOCK
        if lazy and kind in (b"0", b"\0", b"7") and shown.rpartition(".")[2] in IMAGE_EXTENSIONS:
            if offset + size > end:
                raise DataError(f"{where}: cut short in member {shown!r} (at byte {end})")
            f.seek(size + pad, 1)
            data = Span(offset, size)
        else:
            data = f.read(size)
            if len(data) < size:
                raise DataError(f"{where}: cut short in member {shown!r} (at byte "
                                f"{offset + len(data)})")
            if pad and len(f.read(pad)) < pad:
                raise DataError(f"{where}: cut short after member {shown!r}")
        offset += size + pad
        if kind == b"L":  # GNU long name of the next member
            long_name = data.rstrip(b"\0")
        elif kind == b"x":  # pax header: its path record names the next member
            for record in data.split(b"\n"):
                _, _, pair = record.partition(b" ")
                if pair.startswith(b"path="):
                    long_name = pair[5:]
        elif kind in (b"0", b"\0", b"7"):
            yield shown, data
            long_name = None
        else:  # folders, links, global headers: no samples
            long_name = None


def read(f: IO[bytes], where: str, lazy: bool = False) -> Iterator[Sample]:
    """The samples of the shard stream ``f`` (named ``where`` in errors), in order; with
    ``lazy`` each image is a :class:`Span` of ``f`` instead of its bytes."""
    key, image, label, name = None, None, None, ""

    def done() -> Sample:
        if image is None or label is None:
            missing = ".jpg" if image is None else ".cls"
            raise DataError(f"{where}: sample {key!r} has no {missing} member; allowed: "
                            "<key>.jpg and <key>.cls for every key")
        return Sample(key, image, label, where)

    for name, data in _members(f, where, lazy):
        parts = split_name(name)
        if parts is None:
            raise DataError(f"{where}: member {name!r} has no extension; allowed: "
                            "<key>.jpg and <key>.cls")
        k, ext = parts
        if k != key:
            if key is not None:
                yield done()
            key, image, label = k, None, None
        elif (ext in IMAGE_EXTENSIONS and image is not None) or (ext == "cls" and label
                                                                  is not None):
            raise DataError(f"{where}: member {name!r} twice (duplicate key)")
        if ext in IMAGE_EXTENSIONS:
            image = data
        elif ext == "cls":
            text = data.strip()
            if not (text.isdigit() and text.isascii() and len(text) < 10):
                raise DataError(f"{where}: {name!r} holds {data[:20]!r}; allowed: a label, "
                                "a non-negative integer in decimal")
            label = int(text)
    if key is not None:
        yield done()


def read_file(path: str) -> Iterator[Sample]:
    """The samples of the shard file ``path``."""
    with _open(path) as f:
        yield from read(f, path)


def _open(path: str, buffering: int = 1 << 20) -> IO[bytes]:
    try:
        return open(path, "rb", buffering=buffering)
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None


class ShardFile:
    """A shard open for reading its images at their spans, by this process or by another one
    it is handed to (:meth:`hand_to`; ``ident`` names it there); closed when no sample of it is
    left, then ``on_close(ident)`` (e.g. to tell those processes)."""

    _idents = itertools.count()

    def __init__(self, fd: int, path: str, on_close=None):
        self._fd, self.path, self.ident = fd, path, next(self._idents)
        self._finalizer = weakref.finalize(self, _close, fd, self.ident, on_close)

    def read(self, span: Span, key: str) -> bytes:
        return pread(self._fd, span, self.path, key)

    def hand_to(self, conn, pid: int) -> None:
        """Give process ``pid`` a descriptor of its own over the socket ``conn`` (SCM_RIGHTS:
        nothing is opened again)."""
        from multiprocessing.reduction import send_handle

        send_handle(conn, self._fd, pid)


def _close(fd: int, ident: int, on_close) -> None:
    os.close(fd)
    if on_close is not None:
        on_close(ident)


def pread(fd: int, span: Span, path: str, key: str) -> bytes:
    """The bytes at ``span`` of the open shard ``fd``; DataError when they are not all there."""
    try:
        data = os.pread(fd, span.size, span.offset)
    except OSError as err:
        raise DataError(f"{path}: sample {key!r}: cannot be read ({err.strerror})") from None
    if len(data) != span.size:
        raise DataError(f"{path}: sample {key!r}: the shard ends early (changed since it was "
                        "read?)")
    return data


def read_lazily(path: str, on_close=None) -> Iterator[Sample]:
    """The samples of the shard file ``path``, each image a :class:`Span` of a
    :class:`ShardFile` (``Sample.file``) that stays open while any of its samples lives;
    ``on_close(ident)`` once it is closed."""
    with _open(path, 8192) as f:  # the headers and labels between images, not the images
        shard = ShardFile(os.dup(f.fileno()), path, on_close)
        for sample in read(f, path, lazy=True):
            yield sample._replace(file=shard)
