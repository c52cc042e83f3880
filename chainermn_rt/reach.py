"""Whether the user a job runs as can reach a file, judged from the modes on this machine.

A job runs on the nodes as its user (the submitter, or sbatch's ``--uid``), who must be able to
enter every folder on the way to each file it names and read (or run, or write) the file. The
nodes see the same shared file systems as this machine, so a folder that stops the user here
(a clone in a 0700 home) stops every rank there; :func:`blocker` says which, before anything
is submitted.

The judgement is POSIX's mode bits: the owner's when the user owns it, else the group's when
the user is in its group, else the others'. A file or folder with an access ACL is not judged
(it may let the user in); a path that is not on this machine is not judged either (the nodes
may have it). Both the path as written and where its links lead are walked.

>>> import os, tempfile
>>> folder = tempfile.TemporaryDirectory(); top = folder.name; os.chmod(top, 0o700)
>>> open(os.path.join(top, "train.py"), "w").close()
>>> who = Who("someone", 4242, frozenset({4242}))
>>> print(blocker(os.path.join(top, "train.py"), who, READ).replace(top, "TOP"))
the folder TOP (drwx------ root:root) does not let user someone in
>>> blocker(os.path.join(top, "train.py"), Who("root", 0, frozenset({0})), READ) is None
True
>>> folder.cleanup()
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.errors import UserError, message_value

READ, WRITE, EXECUTE = 4, 2, 1
_VERBS = {"file": {READ: "read", WRITE: "write", EXECUTE: "run"},
          "folder": {READ: "list", WRITE: "write in", EXECUTE: "enter"}}
_ACL = "system.posix_acl_access"


@dataclass(frozen=True)
class Who:
    """A user, as the kernel sees one: name (for messages), uid and every group id."""

    name: str
    uid: int
    gids: frozenset[int]

    @classmethod
    def this_process(cls) -> Who:
        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        return cls(name, uid, frozenset({os.getgid(), *os.getgroups()}))

    @classmethod
    def named(cls, user: str, group: str | None, field: str) -> Who:
        """The user sbatch's ``--uid=USER`` (a name or a number) and ``--gid=GROUP`` make:
        GROUP (else the user's own) and the user's other groups."""
        try:
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        except (KeyError, ValueError, OverflowError):
            raise UserError(f"{field}: no user {message_value(user)} on this machine; "
                            "allowed: a user name or number the nodes share") from None
        gid = entry.pw_gid
        if group is not None:
            try:
                gid = grp.getgrgid(int(group)).gr_gid if group.isdigit() else \
                    grp.getgrnam(group).gr_gid
            except (KeyError, ValueError, OverflowError):
                raise UserError(f"{field}: no group {message_value(group)} on this machine; "
                                "allowed: a group name or number the nodes share") from None
        return cls(entry.pw_name, entry.pw_uid,
                   frozenset({gid, *os.getgrouplist(entry.pw_name, entry.pw_gid)}))

    def __str__(self) -> str:
        return f"user {self.name}"


def _owner(info: os.stat_result) -> str:
    def name(lookup, number):
        try:
            return lookup(number)[0]
        except KeyError:
            return str(number)
    return f"{name(pwd.getpwuid, info.st_uid)}:{name(grp.getgrgid, info.st_gid)}"


def _allows(info: os.stat_result, who: Who, need: int) -> bool:
    if who.uid == 0:  # root reads and writes anything, runs what anyone may run
        return not need & EXECUTE or stat.S_ISDIR(info.st_mode) or bool(info.st_mode & 0o111)
    shift = 6 if info.st_uid == who.uid else 3 if info.st_gid in who.gids else 0
    return (info.st_mode >> shift) & need == need


def _has_acl(path: str) -> bool:
    try:
        return _ACL in os.listxattr(path)
    except OSError:
        return False


def _chain(path: str) -> list[str]:
    """The folders on the way to ``path`` (absolute), top first."""
    parents = list(Path(path).parents)
    return [str(p) for p in reversed(parents)]


def blocker(path: str | Path, who: Who, need: int) -> str | None:
    """What keeps ``who`` from ``need`` (READ, WRITE, EXECUTE, or'ed) on ``path``: a phrase
    naming the folder or file and its mode, owner and group; None when nothing does, or the
    path is not on this machine (see the module's docstring)."""
    path = os.path.abspath(path)
    try:
        real = os.path.realpath(path, strict=True)
    except (OSError, RuntimeError):
        return None
    for walked in dict.fromkeys((path, real)):
        for folder in _chain(walked):
            try:
                info = os.stat(folder)
            except OSError:
                return None
            if not _allows(info, who, EXECUTE) and not _has_acl(folder):
                return (f"the folder {folder} ({stat.filemode(info.st_mode)} {_owner(info)}) "
                        f"does not let {who} in")
    info = os.stat(real)
    if not _allows(info, who, need) and not _has_acl(real):
        what = "folder" if stat.S_ISDIR(info.st_mode) else "file"
        verbs = " or ".join(word for bit, word in _VERBS[what].items() if need & bit)
        return (f"the {what} {real} ({stat.filemode(info.st_mode)} {_owner(info)}) does not "
                f"let {who} {verbs} it")
    return None
