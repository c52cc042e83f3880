"""Shards damaged on purpose, for the loaders' tests (tests/test_data_loader.py and
tests/test_data_dali.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chainermn_rt.data import manifest, shards


def damaged_copy(path: Path, target: Path, damage: Callable[[bytes], bytes]) -> str:
    """A copy of the shard folder ``path`` in the new folder ``target``, sample 2 of its second
    shard's image replaced by ``damage(image)`` (the manifest's sha256s zeroed: the loaders do
    not check them; staging does); that sample's key."""
    target.mkdir()
    m, records, key = manifest.load(path), [], None
    for shard in m.shards:
        samples = list(shards.read_file(str(path / shard.name)))
        if shard.name == m.shards[1].name:
            samples[2] = samples[2]._replace(data=damage(samples[2].data))
            key = samples[2].key
        blob = b"".join(shards.member(f"{s.key}.jpg", s.data)
                        + shards.member(f"{s.key}.cls", str(s.label).encode())
                        for s in samples) + shards.END
        (target / shard.name).write_bytes(blob)
        records.append(manifest.Shard(shard.name, len(samples), len(blob), "0" * 64))
    (target / "manifest.json").write_text(manifest.to_json(manifest.Manifest(
        m.classes, None, tuple(records))))
    return key
