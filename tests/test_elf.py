"""ELF shared objects read without binutils (chainermn_rt/elf.py), checked against binutils'
`readelf` on this machine's real libraries: Open MPI 4.1's libmpi, glibc's libc and libdl
(DT_HASH), libstdc++ and UCX's libucp (GNU hash only); the Debian 13 root's Open MPI 5, which
needs the GLIBC_2.38 that Debian 12's glibc 2.36 lacks (the failure the check exists for).
Damaged copies (every truncation, random bytes over the headers and tables) are one-line
ValueErrors, never another exception."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainermn_rt import elf
from chainermn_rt.elf import ElfError, glibc_needed, glibc_of, read_elf

from conftest import require_commands

ARCH = os.uname().machine  # x86_64 or aarch64: Debian's multiarch folders are named so
LIB = Path(f"/usr/lib/{ARCH}-linux-gnu")
LIBC = LIB / "libc.so.6"
LIBDL = LIB / "libdl.so.2"  # glibc's 14 kB stub: hash tables, version needs and definitions
REAL = [LIB / "libmpi.so.40", LIBC, LIBDL, LIB / "libstdc++.so.6", LIB / "libucp.so.0"]


def readelf(path: Path, *flags: str) -> str:
    require_commands("readelf")
    return subprocess.run(["readelf", "-W", *flags, str(path)], capture_output=True, text=True,
                          check=True, timeout=60).stdout


# readelf --dyn-syms: "  7: 0000000000001100  1 FUNC GLOBAL DEFAULT  16 name@VERSION", with
# aarch64's "[VARIANT_PCS]" after the visibility, a needed version's " (5)" after the name,
# "bad section index[ 48]" for a section a strip removed; STB_GNU_UNIQUE is "<OS specific>: 10"
# in a file whose OS ABI byte says SYSV, not GNU
SYMBOL = re.compile(r"\s*\d+: [0-9a-f]+\s+\S+\s+\S+\s+(?P<bind><OS specific>: \d+|\S+)"
                    r"\s+(?P<vis>\S+)"
                    r"(?:\s+\[[^]]*\])?\s+(?P<ndx>bad section index\[ *\d+\]|\S+)\s+"
                    r"(?P<name>\S+)(?: \(\d+\))?$")
EXPORTED = ("GLOBAL", "WEAK", "UNIQUE", "<OS specific>: 10")


def readelf_view(path: Path) -> dict:
    """What readelf -d -V --dyn-syms says, in ElfInfo's terms."""
    out = readelf(path, "-d", "-V", "--dyn-syms")
    dynamic = {kind: [] for kind in ("NEEDED", "SONAME", "RUNPATH", "RPATH")}
    for kind, value in re.findall(r"\((NEEDED|SONAME|RUNPATH|RPATH)\)\s+.*?\[(.*)\]", out):
        dynamic[kind].append(value)
    needs, defs, exports, section = [], [], set(), None
    for line in out.splitlines():
        if line.startswith(("Version", "Symbol table")):
            section = line.split()[0] + line.split()[1]
        elif section == "Versiondefinition" and (m := re.search(
                r"Rev: \d+\s+Flags: (.*?)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", line)):
            if "BASE" not in m[1]:
                defs.append(m[2])
        elif section == "Versionneeds" and (m := re.search(r"File: (\S+)\s+Cnt:", line)):
            needs.append((m[1], []))
        elif section == "Versionneeds" and (m := re.search(r"Name: (\S+)\s+Flags:", line)):
            needs[-1][1].append(m[1])
        elif section == "Symboltable" and (m := SYMBOL.match(line)):
            if m["bind"] in EXPORTED and m["ndx"] != "UND" and \
                    m["vis"] in ("DEFAULT", "PROTECTED"):
                exports.add(m["name"].split("@")[0])
    split = [p for value in dynamic["RUNPATH"] for p in value.split(":")], \
        [p for value in dynamic["RPATH"] for p in value.split(":")]
    return {"soname": (dynamic["SONAME"] or [None])[0], "needed": tuple(dynamic["NEEDED"]),
            "runpath": tuple(split[0]), "rpath": tuple(split[1]),
            "version_needs": tuple((lib, tuple(names)) for lib, names in needs),
            "version_defs": tuple(defs), "exports": frozenset(exports)}


def as_view(info: elf.ElfInfo) -> dict:
    return {key: getattr(info, key) for key in ("soname", "needed", "runpath", "rpath",
                                                "version_needs", "version_defs", "exports")}


def one_line_error(path, match: str = "") -> str:
    with pytest.raises(ElfError) as caught:
        read_elf(path)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError) and "\n" not in message
    assert message.startswith(f"{path}: ") and match in message, message
    return message


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_libraries_read_as_readelf_reads_them(path):
    info = read_elf(path)
    assert as_view(info) == readelf_view(path)
    assert info.machine == {"x86_64": "x86-64"}.get(ARCH, ARCH) and info.path == str(path)
    assert info.exports  # every one of them exports something


def test_what_the_check_asks_of_open_mpi_4_and_glibc():
    mpi = read_elf(LIB / "libmpi.so.40")
    assert mpi.soname == "libmpi.so.40" and {"MPI_Init", "MPI_Allreduce"} <= mpi.exports
    assert mpi.runpath == (f"{LIB}/openmpi/lib",)
    assert "GLIBC_2.34" in mpi.needs("libc.so.6") and mpi.needs("libnothere.so") == ()
    assert glibc_needed(mpi) == (2, 34)  # Debian 12's Open MPI: glibc 2.34 or later
    # the release a libc defines, as the libc this process runs on says it (confstr)
    running = tuple(map(int, os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2]))
    assert glibc_of(LIBC) == running
    if "VERSION_ID=\"12\"" in Path("/etc/os-release").read_text():
        assert glibc_of(LIBC) == (2, 36)
    # GLIBC_ABI_DT_RELR (packed relocations) is glibc 2.36's
    assert "GLIBC_ABI_DT_RELR" in read_elf(LIBDL).needs("libc.so.6")
    assert glibc_needed(read_elf(LIBDL)) == (2, 36)
    # a library that defines no glibc version is not a libc
    with pytest.raises(ElfError, match="defines no GLIBC_ version: not glibc's libc"):
        glibc_of(LIB / "libmpi.so.40")


@pytest.mark.debian13
def test_debian13_open_mpi_needs_a_glibc_debian12_lacks(debian13_root):
    """The failure seen: Debian 13's Open MPI 5 in a Debian 12 image wanted GLIBC_2.38."""
    lib = debian13_root.rootfs / f"usr/lib/{ARCH}-linux-gnu"
    mpi = read_elf(lib / "libmpi.so.40")
    assert as_view(mpi) == readelf_view(lib / "libmpi.so.40")
    assert "GLIBC_2.38" in mpi.needs("libc.so.6") and "MPI_Init" in mpi.exports
    assert glibc_needed(mpi) == (2, 38)
    assert glibc_of(lib / "libc.so.6") == (2, 41)  # Debian 13's glibc
    assert glibc_of(LIBC) == (2, 36) < glibc_needed(mpi)  # Debian 12's: too old


def patched(tmp_path: Path, source: Path, edits: dict[int, bytes], name: str = "lib.so") -> Path:
    data = bytearray(source.read_bytes())
    for at, new in edits.items():
        data[at:at + len(new)] = new
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def dynamic_entry(path: Path, tag: int) -> int:
    """The file offset of the first dynamic entry with ``tag``, found through readelf."""
    offset = int(re.search(r"Dynamic section at offset (0x[0-9a-f]+)", readelf(path, "-d"))[1],
                 16)
    data = path.read_bytes()
    while (found := struct.unpack_from("<q", data, offset)[0]) != tag:
        assert found != 0, f"no tag {tag:#x}"
        offset += 16
    return offset


def test_rpath_and_a_gnu_hash_only_file_as_readelf_reads_them(tmp_path):
    # libmpi's DT_RUNPATH made a DT_RPATH (older linkers write that)
    source = LIB / "libmpi.so.40"
    path = patched(tmp_path, source, {dynamic_entry(source, 29): struct.pack("<q", 15)})
    info = read_elf(path)
    assert info.rpath == (f"{LIB}/openmpi/lib",) and info.runpath == ()
    assert as_view(info) == readelf_view(path)
    # libdl without DT_HASH: the symbols counted from its GNU hash table instead
    hashless = patched(tmp_path, LIBDL, {dynamic_entry(LIBDL, 4): struct.pack("<q", 0x6ffffdf0)},
                       "hashless.so")
    assert read_elf(hashless).exports == read_elf(LIBDL).exports


def test_what_is_not_a_shared_object_is_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text(f"GROUP ( {LIBC} )\n")  # a linker script, as libc.so is
    assert one_line_error(text) == f"{text}: not an ELF file"
    (tmp_path / "empty").touch()
    one_line_error(tmp_path / "empty", "an empty file")
    assert one_line_error(tmp_path) == f"{tmp_path}: a folder, not a shared object"
    assert one_line_error(tmp_path / "nothere.so") == f"{tmp_path}/nothere.so: no such file"
    one_line_error(Path("/dev/null"), "not a regular file")
    os.mkfifo(tmp_path / "fifo")  # refused, not waited on
    one_line_error(tmp_path / "fifo", "not a regular file")
    odd = tmp_path / "a\nb.so"
    shutil.copy(text, odd)
    assert "\n" not in str(pytest.raises(ElfError, read_elf, odd).value)
    assert str(pytest.raises(ElfError, read_elf, "a\0b").value) == "a\\x00b: not a path"
    # real executables, as readelf says they are
    for name in (shutil.which("ls"), sys.executable):
        program = Path(name).resolve()
        kind = re.search(r"Type:\s+(\S+)", readelf(program, "-h"))[1]
        one_line_error(program, "an ELF executable" + (", not" if kind == "EXEC" else
                                                       " (position-independent), not"))
    # libdl with its header's class, byte order, machine or type changed
    for edits, what in (({4: b"\1"}, "a 32-bit ELF file, not a 64-bit shared object"),
                        ({5: b"\2"}, "a big-endian ELF file"),
                        ({18: struct.pack("<H", 40)}, "an ELF file for ARM, not for x86-64"),
                        ({18: struct.pack("<H", 999)}, "an ELF file for machine 999"),
                        ({16: struct.pack("<H", 2)}, "an ELF executable, not a shared object"),
                        ({16: struct.pack("<H", 1)}, "an ELF relocatable object (.o), not a"),
                        ({16: struct.pack("<H", 4)}, "an ELF core dump, not a shared object")):
        one_line_error(patched(tmp_path, LIBDL, edits), what)


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """The program headers' (type, file offset, size in the file)."""
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    return [(p_type, offset, filesz) for p_type, _f, offset, _a, _p, filesz, _m, _al in
            (struct.unpack_from("<IIQQQQQQ", data, phoff + 56 * i) for i in range(phnum))]


def loaded_end(data: bytes) -> int:
    """Where the last loaded segment ends in the file (what a truncation must not cut)."""
    return max(offset + size for p_type, offset, size in segments(data) if p_type == 1)


def test_every_truncation_is_one_line(tmp_path):
    data = LIBDL.read_bytes()
    end = loaded_end(data)
    path = tmp_path / "cut.so"
    path.write_bytes(data[:end])
    # past the loaded part (the section headers cut off, as sstrip does): the same library
    assert as_view(read_elf(path)) == as_view(read_elf(LIBDL))
    # every length through the ELF header and program headers, then every 7th byte, cut
    # from the end down
    for length in sorted({*range(0, 720), *range(720, end, 7), end - 1}, reverse=True):
        os.truncate(path, length)
        one_line_error(path)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("elf") / "damaged.so"


def regions(data: bytes) -> list[tuple[int, int]]:
    """The header, the program headers, the dynamic segment and the tables it points to."""
    loads = [(offset, offset + size) for p_type, offset, size in segments(data) if p_type == 1]
    dynamic = next((offset, offset + size) for p_type, offset, size in segments(data)
                   if p_type == 2)
    phoff, = struct.unpack_from("<Q", data, 32)
    headers = (phoff, phoff + 56 * len(segments(data)))
    # the first loaded segment holds the hash tables, symbols, strings and version tables
    return [(0, 64), headers, dynamic, (headers[1], loads[0][1]), (0, loaded_end(data))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_bytes_over_the_headers_are_one_line_or_read(scratch, data):
    """Damage is refused in one line, or (bytes a reader does not check: a name, a hash) read
    as it is; never IndexError, struct.error, MemoryError or a hang."""
    original = LIBDL.read_bytes()
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        start, stop = data.draw(st.sampled_from(regions(original)))
        at = data.draw(st.integers(start, stop - 1))
        new = data.draw(st.binary(min_size=1, max_size=16))
        damaged[at:at + len(new)] = new
    scratch.write_bytes(bytes(damaged))
    try:
        info = read_elf(scratch)
    except ElfError as err:
        assert "\n" not in str(err) and str(err).startswith(f"{scratch}: ")
    else:
        assert isinstance(info.exports, frozenset)
        glibc_needed(info)
