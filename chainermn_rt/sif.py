"""What a SIF file (Apptainer's image format) says about itself, read without Apptainer: its
magic and the labels of its inspect metadata (where ``apptainer inspect`` reads them), hence
which of the bundle's flavours it is; and which image names a job may give Apptainer
(:func:`check_image`: files it built, not a registry's references).

The file is untrusted: every offset and size is checked against the file's size and small
bounds before it is read; anything else is :class:`NotSif` with the reason.

>>> import tempfile
>>> with tempfile.NamedTemporaryFile() as f:
...     _ = f.write(b"#!/bin/sh\\n" + bytes(200)); f.flush()
...     try:
...         read_labels(f.name)
...     except NotSif as err:
...         print(err)
no SIF magic at byte 32
>>> flavor_of({"org.opencontainers.image.title": "chainermn-rt-gpu-dali"})
'gpu-dali'
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from chainermn_rt.errors import UserError

MAGIC = b"SIF_MAGIC\0"
MAGIC_AT = 32                         # after the launch script line
HEADER = struct.Struct("<6q")         # descriptors free, total, offset, size; data offset, size
HEADER_AT = 80
DESCRIPTOR = struct.Struct("<i?IIIqqq")  # data type, used, id, group, link, offset, size, padded
DESCRIPTOR_SIZE = 585                 # the fields above, times, uid/gid, a name and extra bytes
GENERIC_JSON = 0x4006                 # the data type of the inspect metadata
MAX_DESCRIPTORS = 4096
MAX_JSON_BYTES = 1 << 20
TITLE = "org.opencontainers.image.title"  # chainermn-rt-FLAVOR (containers/blocks/metadata.py)
TITLE_PREFIX = "chainermn-rt-"


class NotSif(ValueError):
    """The file is not a SIF (or a damaged one); the message says what was found."""


def _read_at(f, offset: int, size: int, total: int, what: str) -> bytes:
    if offset < 0 or size < 0 or offset + size > total:
        raise NotSif(f"its {what} lies outside the file")
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise NotSif(f"its {what} is cut short")
    return data


def is_sif(path: str | os.PathLike) -> bool:
    """Whether the file starts like a SIF (the magic only)."""
    try:
        with open(path, "rb") as f:
            return f.read(MAGIC_AT + len(MAGIC))[MAGIC_AT:] == MAGIC
    except OSError:
        return False


def read_labels(path: str | os.PathLike) -> dict[str, str]:
    """The SIF's labels (``{}`` when it carries no inspect metadata); NotSif when the file is not
    a SIF; OSError when it cannot be read."""
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_AT + HEADER.size)
        if head[MAGIC_AT:MAGIC_AT + len(MAGIC)] != MAGIC:
            raise NotSif(f"no SIF magic at byte {MAGIC_AT}")
        if len(head) < HEADER_AT + HEADER.size:
            raise NotSif("its header is cut short")
        _free, count, offset, size, _data, _data_size = HEADER.unpack_from(head, HEADER_AT)
        if not 0 <= count <= MAX_DESCRIPTORS or size != count * DESCRIPTOR_SIZE:
            raise NotSif(f"its header lists {count} descriptors in {size} bytes")
        table = _read_at(f, offset, size, total, "descriptor table")
        labels: dict[str, str] = {}
        for i in range(count):
            kind, used, *_ids, at, length, _padded = DESCRIPTOR.unpack_from(
                table, i * DESCRIPTOR_SIZE)
            if not used or kind != GENERIC_JSON:
                continue
            if length > MAX_JSON_BYTES:
                raise NotSif(f"its metadata object is {length} bytes (at most {MAX_JSON_BYTES})")
            labels.update(_labels(_read_at(f, at, length, total, "metadata object")))
        return labels


def _labels(data: bytes) -> dict[str, str]:
    try:
        doc = json.loads(data)
    except ValueError:
        raise NotSif("its metadata object is not JSON") from None
    for key in ("data", "attributes", "labels"):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def flavor_of(labels: dict[str, str]) -> str | None:
    """The bundle's flavour an image's labels name (its title ``chainermn-rt-FLAVOR``); None
    for an image the bundle did not build."""
    title = labels.get(TITLE, "")
    return title[len(TITLE_PREFIX):] or None if title.startswith(TITLE_PREFIX) else None


# What Apptainer reads as a registry or another engine's image, not as a file: `scheme:...`
# (docker://, library://, oras://, docker-daemon:, docker-archive:, oci:, ...) or, unless it
# starts with / ./ ../, a Docker reference with a tag or digest (`chainermn-rt:0.1.0-cpu`,
# `ghcr.io/x/y@sha256:...`).
APPTAINER_SCHEMES = re.compile(r"(docker|docker-daemon|docker-archive|oci|oci-archive|library|"
                               r"oras|shub|https?):")
DOCKER_REFERENCE = re.compile(r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9._-]+(?:/[a-z0-9._-]+)*"
                              r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})")


def check_image(image: str, field: str, gpus: bool, where: str = "") -> str | None:
    """Refuse what Apptainer would fetch from a registry (the bundle runs SIF files it built:
    ``make sif``); where ``image`` is a file on this machine (the login node sees the cluster's
    shared file systems), refuse one that is not a SIF, and a SIF of the cpu flavour (its
    labels) for ranks with GPUs. Returns the SIF's flavour, or None (not here, not labelled).

    >>> check_image("/nowhere/x.sif", "--image", gpus=True) is None
    True
    >>> check_image("chainermn-rt:0.1.0-cpu", "--image", gpus=False)
    Traceback (most recent call last):
    ...
    chainermn_rt.errors.UserError: --image: 'chainermn-rt:0.1.0-cpu' is a registry's ...
    """
    explicit_path = image.startswith(("/", "./", "../"))
    if APPTAINER_SCHEMES.match(image) or (not explicit_path and DOCKER_REFERENCE.fullmatch(image)):
        raise UserError(f"{field}: {image!r} is a registry's or an engine's image reference, "
                        "which apptainer would fetch on every node; allowed: the path of a SIF "
                        "file (make sif FLAVOR=...; ./NAME for a file whose name has a ':')")
    path = Path(image)
    try:
        here = path.is_file()
    except OSError:  # a name too long for this machine's file system
        here = False
    if not here:
        return None  # not on this machine (or an image folder): the runtime says
    try:
        flavor = flavor_of(read_labels(path))
    except NotSif as err:
        raise UserError(f"{field}: {image} is not a SIF file ({err}); allowed: a SIF built by "
                        "make sif") from None
    except OSError as err:
        raise UserError(f"{field}: {image} cannot be read ({err.strerror}); allowed: a SIF "
                        "file this user can read") from None
    if gpus and flavor is not None and not flavor.startswith("gpu"):
        raise UserError(f"{field}: {image} is the {flavor} image (its labels) and the ranks of "
                        f"{where or 'this job'} use GPUs; allowed: a gpu flavour's SIF (make sif "
                        "FLAVOR=gpu), or a partition without GPUs")
    return flavor
