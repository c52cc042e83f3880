"""Install the bundle for a site under a prefix (``chainermn-rt install``, ``make install``).

Everything is checked before anything is written (:func:`check`); the install is then built
in a folder beside its place (:func:`stage`, ``PREFIX/.chainermn-rt-install-*``) and renamed
into place, the module files last (:func:`place`), so an interrupted install leaves nothing a
module could point at.

    PREFIX/chainermn-rt/<version>-<flavor>/
        image/NAME        the image, copied read-only (sha256 in MANIFEST.json)
        site.toml         the profile, container.image pointing at image/NAME
        bin/              python3, python (not for pyxis), chainermn-rt
        venv/             the host's chainermn-rt (Python >= 3.11, from wheels, offline)
        MANIFEST.json
    PREFIX/modulefiles/chainermn-rt/<version>-<flavor>.lua     (Lmod)
    PREFIX/modulefiles-tcl/chainermn-rt/<version>-<flavor>     (Environment Modules)
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from chainermn_rt import sif, version
from chainermn_rt.errors import UserError, message_value
from chainermn_rt.files import (
    make_read_only,
    make_writable,
    read_small,
    tree_sha256,
    write_executable,
)
from chainermn_rt.install import modulefiles, wrappers
from chainermn_rt.install.layout import FLAVORS, NAME, Layout
from chainermn_rt.quoting import comment, toml
from chainermn_rt.runtimes import RUNTIMES
from chainermn_rt.site import MAX_PROFILE_BYTES, Site, load_site, parse_site

# what the host's chainermn-rt imports (render's templates); wheels for the host's Python
HOST_DEPENDENCIES = ("jinja2", "markupsafe")
HOST_WHEELS = ("chainermn_rt", *HOST_DEPENDENCIES)
VERSIONS_IN_IMAGE = Path("opt/chainermn_rt/VERSIONS")
# what a prefix never holds: PATH's separator, and what Environment Modules expands in MODULEPATH
PREFIX_NEVER = ":{}[\\$"
MAX_VERSIONS_BYTES = 1 << 16  # an image's VERSIONS is under 1 KB
# what an image folder may hold: the rest (FIFOs, sockets, devices) is refused, never read
_SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device file",
            stat.S_IFBLK: "a device file"}


def min_python(spec: str | None = None) -> tuple[int, int]:
    """The lower bound of ``spec``, by default the package's Requires-Python (its metadata).

    >>> min_python(">=3.11, <3.14")
    (3, 11)
    """
    from importlib.metadata import metadata

    spec = metadata(NAME)["Requires-Python"] if spec is None else spec
    bound = re.search(r">=\s*(\d+)\.(\d+)", spec)
    if bound is None:  # the package's own metadata: a packaging error, not the user's
        raise ValueError(f"Requires-Python {spec!r} has no '>=X.Y' bound")
    return int(bound.group(1)), int(bound.group(2))


def shown(text: str) -> str:
    """A path for a one-line message, whole: as it is when printable, else the ``repr`` of
    its bytes (``'/a\\nb'``, ``'/a\\xffb'``)."""
    return text if text.isprintable() else repr(text.encode("utf-8", "surrogateescape"))[1:]


def _path_text(path: Path, flag: str) -> str:
    """``path`` as text fit for the files an install writes (UTF-8 module files and TOML,
    ``PATH``), else the UserError naming ``flag``."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{flag}: {shown(text)} is not UTF-8; allowed: a UTF-8 path (the "
                        "module files and site.toml are UTF-8 text)") from None
    if not text.isprintable():
        raise UserError(f"{flag}: {shown(text)} contains a control character; allowed: a "
                        "printable path")
    return text


def check_image(runtime: str, image: Path | None) -> Path | None:
    """The image the profile's runtime can run, or None for runtime none; a folder holds only
    folders, files and links this user can read (:func:`_image_entries`)."""
    if runtime == "none":
        if image is not None:
            raise UserError(f"--image: {image}: the profile's runtime is none, which runs no "
                            "image; allowed: no --image, or a profile with a container runtime")
        return None
    kind, phrase = RUNTIMES[runtime].install_image
    if image is None:
        raise UserError(f"--image: missing; allowed: {phrase}, for the profile's runtime "
                        f"{runtime}")
    _path_text(image, "--image")
    if not os.access(image, os.R_OK) or not image.exists():
        raise UserError(f"--image: {image} is missing or unreadable; allowed: {phrase}")
    fits = image.is_dir() if kind == "dir" else (image.is_file() and image.suffix == kind)
    if not fits:
        raise UserError(f"--image: {image} is not what runtime {runtime} runs; allowed: {phrase}")
    if image.is_dir():
        _image_entries(image)
    elif kind == ".sif":
        try:
            sif.read_labels(image)
        except sif.NotSif as err:
            raise UserError(f"--image: {image} is not a SIF file ({err}); allowed: {phrase}"
                            ) from None
    return image.absolute()


def _image_entries(image: Path) -> None:
    """Refuse a folder image holding anything but folders, files and links (a FIFO, a socket,
    a device file: copying would open it, and it may block or act) or an entry this user
    cannot read; one walk that opens no file and follows no link."""
    pending = [image]
    while pending:
        folder = pending.pop()
        if not os.access(folder, os.R_OK | os.X_OK):
            raise UserError(f"--image: {shown(str(folder))} cannot be read by this user;"
                            " allowed: an image whose every folder and file this user can read")
        with os.scandir(folder) as entries:
            for entry in entries:
                kind = stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                if kind in _SPECIAL:
                    raise UserError(f"--image: {shown(entry.path)} is {_SPECIAL[kind]}; "
                                    "allowed: an image of folders, files and links only (remove "
                                    "it from the image)")
                if kind == stat.S_IFDIR:
                    pending.append(Path(entry.path))
                elif kind == stat.S_IFREG and not os.access(entry.path, os.R_OK):
                    raise UserError(f"--image: {shown(entry.path)} cannot be read by "
                                    "this user; allowed: an image whose every folder and file "
                                    "this user can read")


def image_flavor(image: Path | None, given: str | None) -> str:
    """The flavour written in a folder image's VERSIONS or a SIF's labels, else ``given``
    (default cpu)."""
    found = None
    if image is not None and image.is_dir():
        found = _read_versions(image).get("flavor")
    elif image is not None and image.suffix == ".sif":
        found = sif.flavor_of(sif.read_labels(image))  # a SIF: check_image read it
    if found and given and found != given:
        raise UserError(f"--flavor: {given}, but {image} is the {found} flavour; allowed: "
                        f"{found}, or leave it out")
    flavor = found or given or "cpu"
    if flavor not in FLAVORS:
        raise UserError(f"--flavor: {message_value(str(flavor))}; allowed: {' | '.join(FLAVORS)}")
    return flavor


def _read_versions(image: Path) -> dict:
    """A folder image's VERSIONS: a regular file of at most MAX_VERSIONS_BYTES, reached through
    real folders (an image's link names a path inside the image, not on this host)."""
    path = image / VERSIONS_IN_IMAGE
    why = "not TOML"
    try:
        for above in list(reversed(path.relative_to(image).parents))[1:]:
            if (image / above).is_symlink():
                raise ValueError(f"/{above} is a symbolic link")
        return tomllib.loads(read_small(path, MAX_VERSIONS_BYTES).decode("utf-8"))
    except OSError as err:
        why = (err.strerror or "unreadable").lower()
    except UnicodeDecodeError:
        why = "not UTF-8"
    except tomllib.TOMLDecodeError:
        pass
    except ValueError as err:  # read_small: a link, a device, a FIFO, too large
        why = str(err)
    raise UserError(f"--image: {image} has no readable /{VERSIONS_IN_IMAGE} ({why}); allowed: "
                    "an image made by `make image`")


def check_prefix(prefix: Path, image: Path | None = None) -> Path:
    """A prefix an install can fill, checked before any work: printable ASCII (Debian 12's Lmod
    8.6 garbles some bytes of other characters in its record of loaded modules, base64 that
    does not round-trip, and then cannot unload the module), without ``:`` (it separates
    ``PATH``'s and ``MODULEPATH``'s entries) nor ``{ } [ \\ $`` (Environment Modules 5 reads
    them in ``MODULEPATH`` as patterns and variables, and finds no module there), outside
    ``image``, in a folder where a folder can be made (one is made and removed: ``/proc`` and
    read-only file systems refuse it)."""
    text = _path_text(prefix, "--prefix")
    if not text.isascii():
        raise UserError(f"--prefix: {text!r} holds characters beyond "
                        "ASCII; allowed: an ASCII path (Lmod 8.6 garbles others in its record "
                        "of loaded modules, and cannot unload the module then)")
    if bad := sorted(set(text) & set(PREFIX_NEVER)):
        raise UserError(f"--prefix: {text} contains {' '.join(bad)}; allowed: a path without "
                        f"{' '.join(PREFIX_NEVER)} (':' separates PATH's entries; Environment "
                        "Modules reads the others in MODULEPATH as patterns and variables)")
    prefix = prefix.absolute()
    existing = next(p for p in (prefix, *prefix.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--prefix: {prefix}: {existing} is not a writable folder; allowed: a "
                        "folder this user may write (new or existing)")
    if image is not None and image.is_dir():
        real, inside = prefix.resolve(), image.resolve()
        if real == inside or inside in real.parents:
            raise UserError(f"--prefix: {prefix} is inside the image {image}; allowed: a folder "
                            "outside the image (the image is copied under the prefix)")
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=f".{NAME}-probe-"))
    except OSError as err:
        raise UserError(f"--prefix: {prefix}: cannot make a folder in {existing} "
                        f"({(err.strerror or 'refused').lower()}); allowed: a folder this user "
                        "may write (new or existing)") from None
    return prefix


def check_python(python: str) -> str:
    """An interpreter the package supports (min_python) for the host's venv."""
    least = min_python()
    want = ".".join(map(str, least))
    try:
        proc = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60, check=False)
        found = tuple(int(x) for x in proc.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        found = ()
    if len(found) != 2 or found < least:
        said = ".".join(map(str, found)) if found else "no answer"
        raise UserError(f"--python: {python} ({said}); allowed: Python >= {want}, for the host's"
                        " chainermn-rt")
    return python


def check_wheels(folder: Path) -> Path:
    names = [p.name.lower() for p in folder.glob("*.whl")] if folder.is_dir() else []
    missing = [w for w in HOST_WHEELS if not any(n.startswith(w + "-") for n in names)]
    if missing:
        raise UserError(f"--wheels: {folder} lacks {', '.join(missing)}; allowed: the folder "
                        "`make install-wheels` fills")
    return folder.absolute()


def with_image(text: str, image: str) -> str:
    """The profile's text with ``container.image`` set to ``image`` (its ``[container]`` table
    edited in place, comments kept); ValueError where there is no such table.

    >>> print(with_image('name = "x"\\n[container]\\nruntime = "charliecloud"\\n', "/i"))
    name = "x"
    [container]
    image = "/i"
    runtime = "charliecloud"
    <BLANKLINE>
    """
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines)
                   if re.match(r"\s*\[container\]\s*(#.*)?$", line)), None)
    if header is None:
        raise ValueError("no [container] table")
    end = next((i for i in range(header + 1, len(lines)) if re.match(r"\s*\[", lines[i])),
               len(lines))
    body = [line for line in lines[header + 1:end] if not re.match(r"\s*image\s*=", line)]
    new = f"image = {toml(image, '--image')}\n"
    return "".join(lines[:header + 1] + [new] + body + lines[end:])


def profile_header(site_file: Path, image: Path | None) -> str:
    """The installed site.toml's first line: a comment naming where it came from."""
    return (f"# Installed by `chainermn-rt install` from {comment(str(site_file.absolute()))}"
            + (f"; container.image is this install's copy of {comment(str(image))}"
               if image else "") + ".\n")


def bind_targets(site: Site, image: Path) -> list[str]:
    """The Charliecloud bind targets ``image`` lacks (ch-run binds only onto folders the image
    has), to be made in the copy. Refused: a target through a link in the image (what it names
    is a path inside the image, not here: making it could make a folder anywhere), below a
    file, or with a ``..``."""
    missing = []
    for bind in site.container.binds:
        src, _, rest = bind.partition(":")
        target = rest.partition(":")[0] or src
        parts = PurePosixPath(target).parts
        parts = parts[1:] if parts[:1] == ("/",) else parts
        field = f"{shown(str(site.path))}: container.binds: {shown(bind)}"
        if ".." in parts:
            raise UserError(f"{field}: its target holds '..'; allowed: a target path without "
                            "'..'")
        here = image
        for i, part in enumerate(parts):
            here = here / part
            if here.is_symlink():
                raise UserError(f"{field}: its target goes through /{'/'.join(parts[:i + 1])}, "
                                f"a symbolic link in the image {image}; allowed: targets whose "
                                "folders in the image are real folders")
            if not here.exists():
                missing.append("/" + "/".join(parts))
                break
            if not here.is_dir():
                raise UserError(f"{field}: its target goes through /{'/'.join(parts[:i + 1])}, "
                                f"a file in the image {image}; allowed: targets that are "
                                "folders in the image, or new ones")
    return missing


def _venv(python: str, home: Path, wheels: Path, system_site: bool) -> None:
    """The host's chainermn-rt: a venv of ``python`` and the wheels, offline. With
    ``system_site`` (runtime none: its ``python3`` is the ranks') the site's own packages
    (chainer, mpi4py) stay visible under the install's."""
    venv = home / "venv"
    make = [python, "-m", "venv", "--without-pip", *(["--system-site-packages"] * system_site),
            str(venv)]
    for argv, flag in ((make, "--python"),
                       ([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python3"),
                         "install", "-q", "--no-index", "--no-deps", "--ignore-installed",
                         "--find-links",
                         str(wheels), *HOST_WHEELS], "--wheels")):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise UserError(f"{flag}: {' '.join(argv[:3])}... failed: "
                            f"{said[-1] if said else 'no message'}; allowed: wheels made for "
                            f"this Python (make install-wheels PYTHON={python})")


@dataclass(frozen=True)
class Checked:
    """An install every check has passed: nothing is written before it exists."""

    site_file: Path
    site: Site
    image: Path | None
    where: Layout
    text: str  # the profile's text, container.image set to the install's copy
    binds: bool  # Charliecloud bind targets to make in the image's copy
    python: str
    wheels: Path

    @property
    def image_path(self) -> str | None:
        return str(self.where.image(self.image.name)) if self.image else None


def check(site_file: Path, image: Path | None, prefix: Path, wheels: Path,
          flavor: str | None = None, python: str = "python3") -> Checked:
    """Every argument, the image and the prefix checked; UserError naming the first bad one."""
    site = load_site(site_file, "--site")
    runtime = site.container.runtime
    image = check_image(runtime, image)
    where = Layout(check_prefix(prefix, image), version(), image_flavor(image, flavor))
    binds = runtime == "charliecloud" and image is not None and image.is_dir()
    if binds:
        bind_targets(site, image)
    for path in (where.home, where.lua, where.tcl):
        if path.exists() or path.is_symlink():
            raise UserError(f"--prefix: {NAME} {where.module_version} is already installed "
                            f"there ({path}); allowed: another prefix, or remove that version")
    check_wheels(wheels)
    check_python(python)
    text = read_small(site_file, MAX_PROFILE_BYTES, follow_links=True).decode("utf-8")
    checked = Checked(site_file, site, image, where, text, binds, python, wheels)
    if image is None:
        return checked
    try:
        text = with_image(text, checked.image_path)
    except ValueError:
        raise UserError(f"--site: {shown(str(site_file))}: container.image cannot be set (no "
                        "[container] table); allowed: a profile with a [container] "
                        "table") from None
    if parse_site(tomllib.loads(text), site_file) != replace(
            site, container=replace(site.container, image=checked.image_path)):
        raise UserError(f"--site: {shown(str(site_file))}: container.image cannot be set in "
                        "its text; allowed: image = \"...\" as a line of the [container] "
                        "table")
    return replace(checked, text=text)


def stage(c: Checked, stage: Layout) -> None:
    """The whole install under ``stage`` (a Layout beside the prefix): the image's read-only
    copy, site.toml, the venv, the wrappers, MANIFEST.json and the module files."""
    where, site, image = c.where, c.site, c.image
    for folder in (stage.bin, stage.lua.parent, stage.tcl.parent):
        folder.mkdir(parents=True)
    manifest = {"name": NAME, "version": where.version, "flavor": where.flavor,
                "runtime": site.container.runtime, "site": str(c.site_file.absolute()),
                "installed": datetime.datetime.now(datetime.UTC).isoformat(
                    timespec="seconds")}
    if image is not None:
        copy = stage.image(image.name)
        copy.parent.mkdir()
        if image.is_dir():
            shutil.copytree(image, copy, symlinks=True)
            made = bind_targets(site, copy) if c.binds else []  # checked again, on the copy
            for target in made:
                (copy / target.lstrip("/")).mkdir(parents=True)
        else:
            shutil.copy2(image, copy)
            made = []
        make_read_only(copy)
        manifest["image"] = {"source": str(image), "path": c.image_path,
                             "sha256": tree_sha256(copy), "bind_targets_made": made}
    (stage.home / "site.toml").write_text(profile_header(c.site_file, image) + c.text)
    _venv(c.python, stage.home, c.wheels, system_site=site.container.runtime == "none")
    py = wrappers.python(site.container, c.image_path, str(where.venv), where.module_version)
    if py is not None:
        for name in ("python3", "python"):
            write_executable(stage.bin / name, py)
    write_executable(stage.bin / NAME, wrappers.chainermn_rt(str(where.venv),
                                                             where.module_version))
    stage.manifest.write_text(json.dumps(manifest, indent=1) + "\n")
    image_name = str(image) if image else None
    stage.lua.write_text(modulefiles.lua(where, site.name, image_name))
    stage.tcl.write_text(modulefiles.tcl(where, site.name, image_name))


def place(stage: Layout, where: Layout) -> None:
    """Rename the staged version's folder into place, then the module files that name it; on
    any failure, what was placed is removed again."""
    placed: list[Path] = []
    try:
        for made, final in ((stage.home, where.home), (stage.lua, where.lua),
                            (stage.tcl, where.tcl)):
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(made, final)
            placed.append(final)
    except BaseException:
        for final in reversed(placed):  # back out of a half-done move
            if final.is_dir():
                make_writable(final)
                shutil.rmtree(final)
            else:
                final.unlink()
        raise


def install(site_file: Path, image: Path | None, prefix: Path, wheels: Path,
            flavor: str | None = None, python: str = "python3") -> Layout:
    """Check everything, then build the install beside PREFIX and rename it into place."""
    checked = check(site_file, image, prefix, wheels, flavor, python)
    where = checked.where
    where.prefix.mkdir(parents=True, exist_ok=True)
    stage_dir = Path(tempfile.mkdtemp(prefix=f".{NAME}-install-", dir=where.prefix))
    staged = Layout(stage_dir, where.version, where.flavor)
    try:
        stage(checked, staged)
        place(staged, where)
    finally:
        if stage_dir.exists():
            make_writable(stage_dir)
            shutil.rmtree(stage_dir)
    return where
