"""What an ELF shared object says about its linking, read without binutils: its SONAME, the
libraries it needs (DT_NEEDED) and where it looks for them (DT_RUNPATH, DT_RPATH), the symbol
versions it needs from each (``readelf -V``'s version needs) and those it defines, and the
dynamic symbols it exports. A host library bound into a container (an MPI, an NCCL net plugin)
is checked with it before a rank starts, as Sarus's hooks do: the glibc it needs
(:func:`glibc_needed`) against the one the image has (:func:`glibc_of`), the symbols a plugin
must export.

It reads what the dynamic loader reads (the program headers, the dynamic segment and the tables
it points to), never the section headers, which a stripped file may lack. The file is
untrusted: every offset and size is checked against the file's size before it is read, and only
the headers and those tables are read, never the whole of a library of hundreds of MB. Anything
that is not a 64-bit little-endian x86-64 or aarch64 shared object, or is damaged, is an
:class:`ElfError` (a ValueError) of one line naming the path and what it is.

>>> import platform
>>> libc = f"/lib/{platform.machine()}-linux-gnu/libc.so.6"   # Debian's multiarch folder
>>> info = read_elf(libc)
>>> info.soname, "malloc" in info.exports, glibc_of(libc) >= (2, 17)
('libc.so.6', True, True)
>>> read_elf("/etc/os-release")
Traceback (most recent call last):
...
chainermn_rt.elf.ElfError: /etc/os-release: not an ELF file
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass

from chainermn_rt.errors import one_line

MACHINES = {62: "x86-64", 183: "aarch64"}
OTHER_MACHINES = {3: "i386", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390", 40: "ARM",
                  243: "RISC-V", 258: "LoongArch"}
OTHER_TYPES = {0: "an ELF file of no type", 1: "an ELF relocatable object (.o)",
               2: "an ELF executable", 4: "an ELF core dump"}
ET_DYN = 3
HEADER = struct.Struct("<16sHHIQQQIHHHHHH")   # Elf64_Ehdr
PROGRAM = struct.Struct("<IIQQQQQQ")          # Elf64_Phdr
DYN = struct.Struct("<qQ")                    # Elf64_Dyn
SYM = struct.Struct("<IBBHQQ")                # Elf64_Sym
VERNEED = struct.Struct("<HHIII")             # Elf64_Verneed: version, cnt, file, aux, next
VERNAUX = struct.Struct("<IHHII")             # Elf64_Vernaux: hash, flags, other, name, next
VERDEF = struct.Struct("<HHHHIII")            # Elf64_Verdef: version, flags, ndx, cnt, hash,
VERDAUX = struct.Struct("<II")                # aux, next; Elf64_Verdaux: name, next
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 1, 4, 5, 6, 10, 11
DT_SONAME, DT_RPATH, DT_RUNPATH = 14, 15, 29
DT_GNU_HASH, DT_FLAGS_1 = 0x6FFFFEF5, 0x6FFFFFFB
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = (0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE,
                                                     0x6FFFFFFF)
DF_1_PIE = 0x08000000
VER_FLG_BASE = 1                   # the definition naming the file itself
EXPORTED_BINDINGS = {1, 2, 10}     # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
EXPORTED_VISIBILITY = {0, 3}       # STV_DEFAULT, STV_PROTECTED
MAX_TABLE = 256 << 20              # the largest table read (libtorch's .dynstr is tens of MB)
MAX_ENTRIES = 1 << 16              # dynamic entries
MAX_VERSIONS = 4096                # version needs or definitions (glibc's libc defines 40)
MAX_SYMBOLS = 1 << 22
CHAIN_BLOCK = 1024
GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?")
# glibc's versions named for a feature, not a release: the release that first defines them
GLIBC_FEATURES = {"GLIBC_ABI_DT_RELR": (2, 36, 0)}


class ElfError(ValueError):
    """Not a usable shared object (or not there); the one-line message names the path and what
    it is."""


@dataclass(frozen=True)
class ElfInfo:
    """What a shared object says about its linking. ``version_needs``: per needed library, in
    the file's order, the version names it needs (``("libc.so.6", ("GLIBC_2.34", ...))``);
    ``version_defs``: the versions it defines itself (its own name left out); ``exports``: the
    names of the dynamic symbols it defines for others (global, weak or unique)."""

    path: str                      # as given, control characters escaped (for messages)
    machine: str                   # "x86-64" or "aarch64"
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    version_needs: tuple[tuple[str, tuple[str, ...]], ...]
    version_defs: tuple[str, ...]
    exports: frozenset[str]

    def needs(self, library: str) -> tuple[str, ...]:
        """The version names needed from ``library`` (a DT_NEEDED name); ``()`` for none."""
        return next((names for name, names in self.version_needs if name == library), ())


def glibc_needed(info: ElfInfo) -> tuple[int, int] | None:
    """The highest glibc release whose versions the object needs (``GLIBC_2.38`` from
    libc.so.6, libm.so.6 ... gives ``(2, 38)``); None when it needs no glibc version."""
    keys = [_glibc_key(v) for _lib, names in info.version_needs for v in names]
    found = max((k for k in keys if k), default=None)
    return found[:2] if found else None


def glibc_of(libc_path: str | os.PathLike) -> tuple[int, int]:
    """The glibc release a libc.so.6 is: the highest ``GLIBC_x.y`` it defines. ElfError for a
    file that is not a shared object, or defines no glibc version (musl's libc)."""
    info = read_elf(libc_path)
    found = max((k for k in map(_glibc_key, info.version_defs) if k), default=None)
    if not found:
        raise ElfError(f"{info.path}: defines no GLIBC_ version: not glibc's libc")
    return found[:2]


def _glibc_key(name: str) -> tuple[int, int, int] | None:
    match = GLIBC.fullmatch(name)
    if match:
        return int(match[1]), int(match[2]), int(match[3] or 0)
    return GLIBC_FEATURES.get(name)


def read_elf(path: str | os.PathLike) -> ElfInfo:
    """The shared object at ``path`` (a link is followed). ElfError, one line, for anything
    else: a missing or unreadable path, a folder, an executable, a 32-bit or foreign file, a
    damaged one."""
    shown = one_line(os.fsdecode(path))
    try:
        # O_NONBLOCK: a FIFO must not hang the open; it is refused below as not a file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ElfError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise ElfError(f"{shown}: a folder, not a shared object") from None
    except OSError as err:
        raise ElfError(f"{shown}: cannot be read ({err.strerror})") from None
    except ValueError:  # a NUL in the name
        raise ElfError(f"{shown}: not a path") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ElfError(f"{shown}: a folder, not a shared object")
        if not stat.S_ISREG(st.st_mode):
            raise ElfError(f"{shown}: not a regular file")
        return _Reader(fd, st.st_size, shown).info()
    except OSError as err:
        raise ElfError(f"{shown}: cannot be read ({err.strerror})") from None
    finally:
        os.close(fd)


class _Reader:
    """One open file: bounded reads at file offsets and at the addresses its segments load."""

    def __init__(self, fd: int, size: int, shown: str):
        self.fd, self.size, self.shown = fd, size, shown
        self.loads: list[tuple[int, int, int]] = []   # (address, offset, size in the file)
        self.strings = b""
        self.machine = ""

    def fail(self, what: str) -> ElfError:
        return ElfError(f"{self.shown}: {what}")

    def damaged(self, what: str) -> ElfError:
        return self.fail(f"a damaged ELF file ({what})")

    def read(self, offset: int, size: int, what: str) -> bytes:
        if size > MAX_TABLE:
            raise self.damaged(f"{what} of {size} bytes")
        if offset < 0 or size < 0 or offset + size > self.size:
            raise self.damaged(f"{what} outside the file")
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise self.damaged(f"{what} cut short")
        return data

    def read_at(self, address: int, size: int, what: str) -> bytes:
        """``size`` bytes at a loaded address (what dynamic entries point to)."""
        for start, offset, length in self.loads:
            if start <= address and address + size <= start + length:
                return self.read(offset + address - start, size, what)
        raise self.damaged(f"{what} outside the loaded segments")

    def left_at(self, address: int) -> int:
        """How many bytes of a loaded segment's file content begin at ``address``."""
        return max((start + length - address for start, _offset, length in self.loads
                    if start <= address < start + length), default=0)

    def string(self, at: int, what: str) -> str:
        end = self.strings.find(b"\0", at)
        if at >= len(self.strings) or end < 0:
            raise self.damaged(f"{what} outside the string table")
        return self.strings[at:end].decode("utf-8", "replace")

    def info(self) -> ElfInfo:
        dynamic = self.header()
        tags: dict[int, int] = {}
        needed, soname, runpath, rpath = [], None, [], []
        for tag, value in dynamic:
            tags.setdefault(tag, value)
        if tags.get(DT_FLAGS_1, 0) & DF_1_PIE:
            raise self.fail("an ELF executable (position-independent), not a shared object")
        if DT_STRTAB in tags:
            self.strings = self.read_at(tags[DT_STRTAB], tags.get(DT_STRSZ, 0), "string table")
        for tag, value in dynamic:
            if tag == DT_NEEDED:
                needed.append(self.string(value, "needed library's name"))
            elif tag == DT_SONAME:
                soname = soname or self.string(value, "SONAME")
            elif tag in (DT_RUNPATH, DT_RPATH):
                (runpath if tag == DT_RUNPATH else rpath).extend(
                    self.string(value, "search path").split(":"))
        return ElfInfo(self.shown, self.machine, soname, tuple(needed), tuple(runpath),
                       tuple(rpath), self.version_needs(tags), self.version_defs(tags),
                       self.exports(tags))

    def header(self) -> list[tuple[int, int]]:
        """Check the ELF header, note the loaded segments; the dynamic entries."""
        head = os.pread(self.fd, HEADER.size, 0)
        if head[:4] != b"\x7fELF":
            raise self.fail("an empty file, not an ELF file" if not head else "not an ELF file")
        if len(head) < 6:
            raise self.damaged("header cut short")
        if head[4] != 2:
            raise self.fail("a 32-bit ELF file, not a 64-bit shared object" if head[4] == 1
                            else f"an ELF file of class {head[4]}, not a 64-bit one")
        if head[5] != 1:
            raise self.fail("a big-endian ELF file, not a little-endian one" if head[5] == 2
                            else f"an ELF file of byte order {head[5]}")
        if len(head) < HEADER.size:
            raise self.damaged("header cut short")
        (_ident, kind, machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize,
         phnum, *_sections) = HEADER.unpack(head)
        if machine not in MACHINES:
            name = OTHER_MACHINES.get(machine, f"machine {machine}")
            raise self.fail(f"an ELF file for {name}, not for x86-64 or aarch64")
        self.machine = MACHINES[machine]
        if kind != ET_DYN:
            raise self.fail(f"{OTHER_TYPES.get(kind, f'an ELF file of type {kind:#x}')}, "
                            "not a shared object")
        if phentsize != PROGRAM.size or phnum == 0:
            raise self.damaged(f"{phnum} program headers of {phentsize} bytes")
        dynamic = None
        table = self.read(phoff, phnum * PROGRAM.size, "program headers")
        for p_type, _flags, offset, address, _paddr, filesz, _memsz, _align in \
                PROGRAM.iter_unpack(table):
            if p_type == PT_LOAD:  # the loader maps it: all of it must be there
                if offset + filesz > self.size:
                    raise self.damaged("a loaded segment past the file's end: cut short?")
                self.loads.append((address, offset, filesz))
            elif p_type == PT_DYNAMIC and dynamic is None:
                dynamic = (offset, filesz)
        if dynamic is None:
            raise self.damaged("no dynamic segment")
        offset, filesz = dynamic
        count = min(filesz // DYN.size, MAX_ENTRIES)
        entries = []
        for tag, value in DYN.iter_unpack(self.read(offset, count * DYN.size, "dynamic segment")):
            if tag == DT_NULL:
                return entries
            entries.append((tag, value))
        raise self.damaged("dynamic segment without an end")

    def version_needs(self, tags: dict[int, int]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if DT_VERNEED not in tags:
            return ()
        needs, at, records = [], tags[DT_VERNEED], 0
        for _ in range(self.count(tags, DT_VERNEEDNUM, "version needs")):
            _version, cnt, file, aux, following = VERNEED.unpack(
                self.read_at(at, VERNEED.size, "version needs"))
            names, aux_at = [], at + aux
            records += cnt
            if records > MAX_VERSIONS:
                raise self.damaged(f"more than {MAX_VERSIONS} version needs")
            for _ in range(cnt):
                _hash, _flags, _other, name, step = VERNAUX.unpack(
                    self.read_at(aux_at, VERNAUX.size, "version needs"))
                names.append(self.string(name, "version name"))
                aux_at += step
            needs.append((self.string(file, "needed library's name"), tuple(names)))
            at += following
        return tuple(needs)

    def version_defs(self, tags: dict[int, int]) -> tuple[str, ...]:
        if DT_VERDEF not in tags:
            return ()
        names, at = [], tags[DT_VERDEF]
        for _ in range(self.count(tags, DT_VERDEFNUM, "version definitions")):
            _version, flags, _index, cnt, _hash, aux, following = VERDEF.unpack(
                self.read_at(at, VERDEF.size, "version definitions"))
            if cnt == 0:
                raise self.damaged("a version definition without a name")
            name, _parent = VERDAUX.unpack(self.read_at(at + aux, VERDAUX.size,
                                                        "version definitions"))
            if not flags & VER_FLG_BASE:
                names.append(self.string(name, "version name"))
            at += following
        return tuple(names)

    def count(self, tags: dict[int, int], tag: int, what: str) -> int:
        if tag not in tags:
            raise self.damaged(f"{what} not counted")
        if not 0 < tags[tag] <= MAX_VERSIONS:
            raise self.damaged(f"{tags[tag]} {what} (1-{MAX_VERSIONS} allowed)")
        return tags[tag]

    def exports(self, tags: dict[int, int]) -> frozenset[str]:
        if DT_SYMTAB not in tags:
            return frozenset()
        if tags.get(DT_SYMENT, SYM.size) != SYM.size:
            raise self.damaged(f"symbols of {tags[DT_SYMENT]} bytes")
        count = self.symbol_count(tags)
        table = self.read_at(tags[DT_SYMTAB], count * SYM.size, "symbol table")
        return frozenset(
            self.string(name, "symbol name") for name, info, other, section, _value, _size
            in SYM.iter_unpack(table) if section != 0 and info >> 4 in EXPORTED_BINDINGS
            and other & 3 in EXPORTED_VISIBILITY)

    def symbol_count(self, tags: dict[int, int]) -> int:
        """How many dynamic symbols: the loader's hash tables say (no entry holds it)."""
        if DT_HASH in tags:  # nbucket, nchain: one chain entry per symbol
            count = struct.unpack("<II", self.read_at(tags[DT_HASH], 8, "hash table"))[1]
        elif DT_GNU_HASH in tags:
            count = self.gnu_hash_count(tags[DT_GNU_HASH])
        else:
            return 0  # no table to look a symbol up in: nothing is exported
        if count > MAX_SYMBOLS:
            raise self.damaged(f"{count} symbols (at most {MAX_SYMBOLS})")
        return count

    def gnu_hash_count(self, at: int) -> int:
        """The symbols of a GNU hash table: those below ``symoffset`` are not hashed; the
        others follow the buckets' chains, whose last entry has its low bit set."""
        nbuckets, symoffset, bloom_size, _shift = struct.unpack(
            "<IIII", self.read_at(at, 16, "GNU hash table"))
        buckets_at = at + 16 + 8 * bloom_size
        buckets = self.read_at(buckets_at, 4 * nbuckets, "GNU hash table")
        last = max(struct.unpack(f"<{nbuckets}I", buckets), default=0)
        if last < symoffset:
            return symoffset
        if last >= MAX_SYMBOLS:
            raise self.damaged(f"{last + 1} symbols (at most {MAX_SYMBOLS})")
        index, at = last, buckets_at + 4 * (nbuckets + last - symoffset)
        while index < MAX_SYMBOLS:  # the last chain, read a block at a time
            block = min(CHAIN_BLOCK, self.left_at(at) // 4, MAX_SYMBOLS - index)
            if block == 0:
                break
            chain = self.read_at(at, 4 * block, "GNU hash table")
            for value in struct.unpack(f"<{block}I", chain):
                index += 1
                if value & 1:
                    return index
            at += 4 * block
        raise self.damaged("GNU hash table's chain without an end")
