"""Whether enroot can run on a node, and where its hooks are, asked of enroot itself.

enroot reads ``SYSCONFDIR/enroot.conf`` (the folder it was built with; a site may bind its own
there), then the environment; ``enroot info`` prints every ``ENROOT_*`` value it settled on.
Hooks run from ``$ENROOT_SYSCONF_PATH/hooks.d`` and ``$ENROOT_CONFIG_PATH/hooks.d``: an
executable ``*.sh`` there is enabled. Every enroot command first makes its cache, data and
runtime folders (``mkdir -p``): ``enroot info`` failing is enroot unable to run for this user.
pyxis runs ``enroot`` found on slurmstepd's PATH: the script takes that PATH where it may read
it (``/proc/$PPID/environ``: the step's own user may not; then the task's PATH).

:data:`SCRIPT` is POSIX ``sh`` printing ``@@chainermn-rt`` sections; :func:`parse` reads them.
:data:`NODE_SCRIPT` adds the node's name, for a step of one task per node under ``srun
--label`` (``site check --live``, the doctor's node check); :func:`by_node` reads its output,
:func:`cannot_run` is the one line both print for a node.

>>> r = parse(EXAMPLE)
>>> r.enabled(PMI_HOOK), r.hook_folders, r.problems
(True, ('/etc/enroot/hooks.d',), ())
>>> parse(MARK + "enroot-run\\nno user namespaces (unshare -U true failed)").problems
('no user namespaces (unshare -U true failed)',)
>>> cannot_run("node2", by_node(f"0: {MARK}node\\n0: node2\\n0: {MARK}enroot-run\\n0: x")["node2"])
'node2: enroot cannot run: x'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chainermn_rt.errors import message_value

MARK = "@@chainermn-rt "
PMI_HOOK = "50-slurm-pmi.sh"  # passes Slurm's PMI(x) variables into the container
MAX_LINES = 200  # of a section; more is not enroot's answer
PATHS = ("SYSCONF", "CONFIG", "DATA", "RUNTIME", "CACHE", "TEMP")

# one section each: the paths enroot settled on, its hooks ("x PATH": executable), problems
SCRIPT = f"""\
m() {{ echo "{MARK}$1"; }}
(
p=$(tr '\\0' '\\n' < /proc/$PPID/environ 2>/dev/null | sed -n 's/^PATH=//p' | head -n 1)
[ -n "$p" ] && PATH=$p
info=""; run=""; e=$(command -v enroot)
m enroot-command; echo "$e"
if [ -z "$e" ]; then run="no enroot on PATH ($PATH)"
elif ! info=$("$e" info 2>&1); then
  run="enroot info failed: $(printf '%s\\n' "$info" | tail -n 1)"; info=""
fi
m enroot-paths; printf '%s\\n' "$info" | grep -E '^  ENROOT_({'|'.join(PATHS)})_PATH='
m enroot-hooks
printf '%s\\n' "$info" | sed -n -e 's/^  ENROOT_SYSCONF_PATH=//p' -e 's/^  ENROOT_CONFIG_PATH=//p' |
while IFS= read -r d; do
  for f in "$d"/hooks.d/*; do
    [ -f "$f" ] || continue
    if [ -x "$f" ]; then echo "x $f"; else echo "- $f"; fi
  done
done
m enroot-run
[ -n "$run" ] && echo "$run"
if command -v unshare >/dev/null 2>&1 && ! unshare -U true 2>/dev/null; then
  echo "no user namespaces (unshare -U true failed)"
fi
command -v unsquashfs >/dev/null 2>&1 || command -v squashfuse >/dev/null 2>&1 || \\
  echo "neither unsquashfs nor squashfuse on PATH"
)
"""


@dataclass(frozen=True)
class EnrootReport:
    paths: dict[str, str]  # "SYSCONF" -> "/etc/enroot", as enroot info says
    hooks: tuple[tuple[str, bool], ...]  # (path, executable)
    problems: tuple[str, ...]  # why enroot cannot run here; () where it can (or no section)
    command: str | None = None  # its path, where found

    @property
    def hook_folders(self) -> tuple[str, ...]:
        return tuple(f"{self.paths[k]}/hooks.d" for k in ("SYSCONF", "CONFIG") if k in self.paths)

    def enabled(self, hook: str) -> bool:
        """Whether enroot runs ``hook``: a file of that name, executable, in its hooks.d."""
        return any(x and p.rsplit("/", 1)[-1] == hook for p, x in self.hooks)


def _lines(body: str) -> list[str]:
    lines = [line for line in body.splitlines() if line.strip()]
    if len(lines) > MAX_LINES:
        raise ValueError(f"enroot: {len(lines)} lines; allowed: at most {MAX_LINES}")
    return lines


def parse(text: str) -> EnrootReport:
    """The script's sections in ``text`` (other sections ignored); ValueError for a line that
    is not what it prints."""
    one: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if line.startswith(MARK):
            name = line[len(MARK):].strip()
            one[name] = ""
        elif name is not None:
            one[name] += line + "\n"
    paths = {}
    for line in _lines(one.get("enroot-paths", "")):
        m = re.match(r"  ENROOT_([A-Z]+)_PATH=(/[^\n]{0,4095})\Z", line)
        if not m or m.group(1) not in PATHS:
            raise ValueError(f"enroot info: {message_value(line, 80)}; allowed: "
                             "ENROOT_..._PATH=/absolute/path")
        paths[m.group(1)] = m.group(2)
    hooks = []
    for line in _lines(one.get("enroot-hooks", "")):
        if not re.match(r"[x-] /[^\n]{0,4095}\Z", line):
            raise ValueError(f"enroot hooks: {message_value(line, 80)}; allowed: a hook's path")
        hooks.append((line[2:], line[0] == "x"))
    command = "".join(_lines(one.get("enroot-command", ""))[:1]).strip() or None
    if command is not None and not re.match(r"/[^\n]{0,4095}\Z", command):
        raise ValueError(f"enroot: {message_value(command, 80)}; allowed: a command's path")
    problems = tuple(message_value(line.strip(), 160) for line in
                     _lines(one.get("enroot-run", "")))
    return EnrootReport(paths, tuple(hooks), problems, command)


EXAMPLE = f"""{MARK}enroot-paths
  ENROOT_SYSCONF_PATH=/etc/enroot
  ENROOT_DATA_PATH=/home/u/.local/share/enroot
{MARK}enroot-hooks
x /etc/enroot/hooks.d/{PMI_HOOK}
- /etc/enroot/hooks.d/98-nvidia.sh
{MARK}enroot-run
"""


# the node's name first: one task per node under srun --label
NODE_SCRIPT = f'echo "{MARK}node"; echo "${{SLURMD_NODENAME:-$(hostname)}}"\n' + SCRIPT
_TASK = re.compile(r"\s*(\d{1,5}): ?(.*)\Z")  # srun --label's prefix


def by_node(out: str) -> dict[str, EnrootReport]:
    """srun --label's output of :data:`NODE_SCRIPT`, each task's lines parsed; ValueError for a
    foreign line."""
    tasks: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = _TASK.match(line)
        if not m:
            raise ValueError(f"{message_value(line)}; allowed: srun --label's lines")
        tasks.setdefault(m.group(1), []).append(m.group(2))
    found = {}
    for lines in tasks.values():
        node = lines[1].strip() if len(lines) > 1 and lines[0] == MARK + "node" else ""
        if not re.match(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z", node):
            raise ValueError(f"a task named no node ({message_value(node or 'nothing')})")
        found[node] = parse("\n".join(lines[2:]))
    return found


def cannot_run(node: str, report: EnrootReport) -> str:
    """The line for a node whose enroot cannot run: the node, what is missing."""
    return f"{node}: enroot cannot run: {'; '.join(report.problems)}"
