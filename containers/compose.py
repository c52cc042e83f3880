"""Put blocks (containers/recipe.py ``Block``) into a build stage and a slim runtime stage.

The build stage installs every block's build packages in one apt step, sets the blocks'
PATH and environment, then runs each block's build steps in order. The runtime stage
installs their runtime packages, takes each block's runtime steps (copies from the build
stage), registers their library folders with the dynamic linker (``ldconfig``, so that
every runtime, with or without the image's ENV, finds them), sets PATH, environment and
run-time defaults, then the flavour's final steps (VERSIONS, user, labels).

Example::

    >>> from containers.recipe import Block, Run
    >>> b = Block("x", build=(Run(("make",)),), build_packages=("gcc",),
    ...           runtime_packages=("libx1",), path=("/opt/x/bin",), library_dirs=("/opt/x/lib",))
    >>> [type(s).__name__ for s in build_stage("b:1", [b]).steps]
    ['Run', 'Env', 'Run']
    >>> print(runtime_stage("r:1", [b]).steps[1].commands[0])
    printf '%s\\n' /opt/x/lib > /etc/ld.so.conf.d/chainermn-rt.conf
"""

from __future__ import annotations

from chainermn_rt.quoting import sh
from containers.blocks import apt, metadata, user
from containers.recipe import Block, Cmd, Env, Run, Stage, Step
from containers.versions import package_version, python_pins

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LD_CONF = "/etc/ld.so.conf.d/chainermn-rt.conf"
# what a login shell sources after Debian's /etc/profile has set its own PATH: enroot starts a
# container through one (pyxis), from `make sqfs`'s SquashFS or `enroot import dockerd://`
PROFILE_PATH = "/etc/profile.d/chainermn-rt-path.sh"


def _packages(blocks: list[Block], which: str) -> list[str]:
    return sorted({p for b in blocks for p in getattr(b, f"{which}_packages")})


def _path(blocks: list[Block]) -> str:
    return ":".join([d for b in blocks for d in b.path] + [SYSTEM_PATH])


def environment(blocks: list[Block]) -> Env:
    return Env((("PATH", _path(blocks)), *(kv for b in blocks for kv in b.env)))


def login_path(blocks: list[Block]) -> Run:
    """The image's PATH again in :data:`PROFILE_PATH`: without it pyxis's ranks ran Debian's
    python3, not the venv's ("No module named chainermn_rt"; docs/sandbox.md)."""
    text = sh(f"PATH={_path(blocks)}")
    return Run((f"printf '%s\\n' {text} 'export PATH' > {PROFILE_PATH}",),
               comment="the image's PATH for login shells (enroot's), after Debian's /etc/profile")


def build_stage(base: str, blocks: list[Block], comment: str = "") -> Stage:
    steps: list[Step] = []
    if _packages(blocks, "build"):
        steps.append(apt.install(_packages(blocks, "build"), comment=comment))
    steps.append(environment(blocks))
    steps += [s for b in blocks for s in b.build]
    return Stage("build", base, steps)


def runtime_stage(base: str, blocks: list[Block], final: list[Step] = (), comment: str = "",
                  name: str = "runtime") -> Stage:
    steps: list[Step] = []
    if _packages(blocks, "runtime"):
        steps.append(apt.install(_packages(blocks, "runtime"), comment=comment))
    steps += [s for b in blocks for s in b.runtime]
    dirs = [d for b in blocks for d in b.library_dirs]
    if dirs:
        steps.append(Run((f"printf '%s\\n' {' '.join(dirs)} > {LD_CONF}", "ldconfig"),
                         comment="the image's libraries, for every runtime's dynamic linker"))
    if any(b.path for b in blocks):
        steps.append(login_path(blocks))
    steps.append(environment(blocks))
    defaults = tuple(kv for b in blocks for kv in b.defaults)
    if defaults:
        steps.append(Env(defaults, defaults=True))
    return Stage(name, base, steps + list(final))


def final_steps(flavor: str, v: dict, system: dict[str, str], extras: tuple[str, ...]) -> list:
    """The runtime stage's last steps: the VERSIONS file, the non-root user, the labels, the
    default command (a registry's Debian has ``bash``; the debootstrap base none, and
    ``enroot import dockerd://`` stopped on "No command specified")."""
    pins = python_pins(extras)
    labelled = {name: pins[name] for name in metadata.LABELLED if name in pins}
    return [metadata.copy_versions(flavor),
            *user.block(v["image"]["user"], v["image"]["uid"]).runtime,
            metadata.labels(flavor, package_version(), system, labelled), Cmd(("bash",))]
