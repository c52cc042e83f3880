"""The manifest of a shard folder (``manifest.json``, written last by ``data pack``): what the
readers, ``data stage`` and ``data check`` trust, validated as one schema.

    {"format": "chainermn-rt-shards/1", "count": 3, "classes": ["cat", "dog"],
     "short_side": null,
     "shards": [{"name": "shard-000000.tar", "count": 3, "bytes": 10240, "sha256": "..."}]}

>>> m = Manifest(classes=("cat", "dog"), short_side=None,
...              shards=(Shard("shard-000000.tar", 3, 10240, "0" * 64),))
>>> from_json(to_json(m), "m.json") == m, m.count
(True, 3)
>>> from_json('{"format": "chainermn-rt-shards/1", "classes": [], "short_side": null, '
...           '"shards": [{"name": "../x.tar"}]}', "m.json")
Traceback (most recent call last):
chainermn_rt.errors.UserError: m.json: shards[0].name: '../x.tar'; allowed: shard-NNNNNN.tar
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.files import read_small

FORMAT = "chainermn-rt-shards/1"
NAME = "manifest.json"
SHARD_NAME = re.compile(r"shard-\d{6}\.tar\Z")
SHA256 = re.compile(r"[0-9a-f]{64}\Z")
MAX_BYTES = 64 << 20  # a manifest of 10 million shards is still smaller


@dataclass(frozen=True)
class Shard:
    name: str
    count: int  # samples
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    classes: tuple[str, ...]  # label i is classes[i]
    short_side: int | None  # images re-encoded to this short side, or None: as they came
    shards: tuple[Shard, ...]

    @property
    def count(self) -> int:
        return sum(s.count for s in self.shards)


def shard_name(index: int) -> str:
    return f"shard-{index:06d}.tar"


def to_json(m: Manifest) -> str:
    return json.dumps({"format": FORMAT, "count": m.count, "classes": list(m.classes),
                       "short_side": m.short_side,
                       "shards": [vars(s) for s in m.shards]}, indent=1) + "\n"


def _field(data: dict, key: str, kind: type, where: str, allowed: str):
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{where}.{key}: {value!r}; allowed: {allowed}" if key in data
                        else f"{where}.{key}: missing; allowed: {allowed}")
    return value


def from_json(text: str, where: str) -> Manifest:
    """The manifest in ``text``; UserError naming ``where`` and the field otherwise."""
    try:
        data = json.loads(text)
    except ValueError as err:
        raise UserError(f"{where}: not JSON ({err}); allowed: a manifest written by "
                        "`chainermn-rt data pack`") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else data
        raise UserError(f"{where}: format: {got!r}; allowed: {FORMAT!r}")
    classes = _field(data, "classes", list, where, "a list of class names")
    if not all(isinstance(c, str) and c for c in classes):
        raise UserError(f"{where}: classes: {classes[:5]!r}...; allowed: non-empty names")
    short = data.get("short_side")
    if short is not None and (not isinstance(short, int) or isinstance(short, bool)
                              or short < 1):
        raise UserError(f"{where}: short_side: {short!r}; allowed: null or a positive integer")
    shards, names = [], set()
    for i, s in enumerate(_field(data, "shards", list, where, "a list of shards")):
        at = f"{where}: shards[{i}]"
        if not isinstance(s, dict):
            raise UserError(f"{at}: {s!r}; allowed: a table")
        name = s.get("name")
        if not isinstance(name, str) or not SHARD_NAME.match(name):
            raise UserError(f"{at}.name: {name!r}; allowed: shard-NNNNNN.tar")
        if name in names:
            raise UserError(f"{at}.name: {name!r} twice; allowed: each shard once")
        names.add(name)
        count = _field(s, "count", int, at, "a positive integer")
        size = _field(s, "bytes", int, at, "a positive multiple of 512")
        digest = _field(s, "sha256", str, at, "64 lowercase hex digits")
        if count < 1:
            raise UserError(f"{at}.count: {count}; allowed: a positive integer")
        if size < 1 or size % 512:
            raise UserError(f"{at}.bytes: {size}; allowed: a positive multiple of 512")
        if not SHA256.match(digest):
            raise UserError(f"{at}.sha256: {digest!r}; allowed: 64 lowercase hex digits")
        shards.append(Shard(name, count, size, digest))
    m = Manifest(tuple(classes), short, tuple(shards))
    if "count" in data and data["count"] != m.count:
        raise UserError(f"{where}: count: {data['count']!r}, but its shards hold {m.count}; "
                        "allowed: the sum of the shards' counts")
    return m


def load(folder: Path, where: str = "") -> Manifest:
    """The manifest of the shard folder ``folder``; UserError when it has none or a bad one."""
    path = Path(folder) / NAME
    label = f"{where}: " if where else ""
    try:
        text = read_small(path, MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{label}{folder}: no {NAME}; allowed: a folder written by "
                        "`chainermn-rt data pack` (an interrupted pack has none: run it again)"
                        ) from None
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise UserError(f"{label}{path}: {err}; allowed: a manifest written by "
                        "`chainermn-rt data pack`") from None
    return from_json(text, f"{label}{path}")
