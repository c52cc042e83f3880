"""Debian's side of a root built here: the host's own mirror, and apt configurations that
touch no system list.

The mirror is read from the host's apt sources (deb822 files in /etc/apt/sources.list.d/
first, then the one-line form), so no mirror host is written in the repository; the images'
base (containers/base.py) reads it here too.

>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "sources.list.d").mkdir()
>>> _ = (d / "sources.list").write_text("deb [arch=amd64] http://m.example/debian bookworm main\\n")
>>> find_mirror(d, "bookworm"), find_mirror(d, "trixie")
('http://m.example/debian', None)
>>> print(private_apt_conf("/var/tmp/sid"), end="")
Dir::Etc::sourcelist "/var/tmp/sid/sources.list";
Dir::Etc::sourceparts "/var/tmp/sid/none";
Dir::State::Lists "/var/tmp/sid/lists";
Dir::Cache "/var/tmp/sid/cache";
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from chainermn_rt.errors import EnvironmentProblem

APT = Path("/etc/apt")
MIRROR_VAR = "CHAINERMN_RT_DEBIAN_MIRROR"  # overrides what the host's apt sources say


def find_mirror(apt: Path, suite: str) -> str | None:
    """The first ``deb`` URI that serves ``suite`` in apt's sources (deb822 or one-line form)."""
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for para in path.read_text().split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and suite in fields.get("suites", []):
                return fields["uris"][0].rstrip("/")
    lists = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1].rstrip("/")
    return None


def host_suite(os_release: Path = Path("/etc/os-release")) -> str | None:
    """The host's Debian codename (``bookworm``), or None on another system."""
    try:
        text = os_release.read_text()
    except OSError:
        return None
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    return match.group(1) if match else None


def host_mirror(apt: Path = APT) -> str:
    """``$CHAINERMN_RT_DEBIAN_MIRROR``, else the mirror the host's apt sources name for its own
    suite; EnvironmentProblem when there is none."""
    if os.environ.get(MIRROR_VAR):
        return os.environ[MIRROR_VAR].rstrip("/")
    suite = host_suite()
    found = find_mirror(apt, suite) if suite else None
    if found is None:
        raise EnvironmentProblem(f"no Debian mirror: the host's apt sources ({apt}/sources.list"
                                 f"(.d)) name none for {suite or 'its suite'}; set {MIRROR_VAR} "
                                 "to one (http://HOST/debian)")
    return found


# What a root's apt takes from the host's: how it reaches the mirror (a proxy), and whether a
# dated mirror's Release files are accepted (a snapshot mirror's sid Release has expired).
CARRIED = ("Acquire::Check-Valid-Until", "Acquire::Check-Date", "Acquire::http::Proxy",
           "Acquire::https::Proxy")


def host_apt_settings(dump: str | None = None) -> str:
    """The host's :data:`CARRIED` apt settings, as lines of an apt.conf file.

    >>> print(host_apt_settings('Acquire::Check-Valid-Until "false";\\nAPT::X "1";\\n'), end="")
    Acquire::Check-Valid-Until "false";
    """
    if dump is None:
        proc = subprocess.run(["apt-config", "dump"], capture_output=True, text=True,
                              check=False)
        dump = proc.stdout if proc.returncode == 0 else ""
    lines = []
    for line in dump.splitlines():
        match = re.fullmatch(r'(\S+) "([^"\\]*)";', line.strip())
        if match and match.group(1) in CARRIED:
            lines.append(f'{match.group(1)} "{match.group(2)}";\n')
    return "".join(lines)


def private_apt_conf(folder: str) -> str:
    """An apt configuration whose sources, lists and caches are all under ``folder``: nothing
    of the system's apt state is read or changed (the status file aside, which ``apt-get
    download`` does not change)."""
    return (f'Dir::Etc::sourcelist "{folder}/sources.list";\n'
            f'Dir::Etc::sourceparts "{folder}/none";\n'
            f'Dir::State::Lists "{folder}/lists";\n'
            f'Dir::Cache "{folder}/cache";\n')
