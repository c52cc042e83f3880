"""A failing rank ends the whole job: chainermn_rt.abort_on_error, its sitecustomize and the
per-rank step that installs it (jobs on the Slurm sandbox: test_abort_on_error_sandbox.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import types

import pytest

from chainermn_rt import abort_on_error
from chainermn_rt.abort_on_error import PYTHONPATH_DIR, failure_line, install, rank_env
from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import ABORT_ON_ERROR_VAR

from conftest import PYTHON, REPO, clean_launcher_env, mpirun_argv

FAIL = str(REPO / "tests" / "programs" / "fail_rank.py")
LINE = "chainermn-rt: rank 1 on {host} failed: RuntimeError: rank 1 fails on purpose; " \
       "aborting the job"


def _python(code: str, env: dict, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _env(**extra) -> dict:
    env = clean_launcher_env()
    env.pop(ABORT_ON_ERROR_VAR, None)
    return env | extra


# -- the hook, in this process, with a stand-in for mpi4py.MPI ----------------------------------
class FakeWorld:
    def __init__(self, size):
        self.size, self.aborted = size, []

    def Get_size(self):  # noqa: N802 - mpi4py's names
        return self.size

    def Get_rank(self):  # noqa: N802
        return 1

    def Abort(self, code):  # noqa: N802
        self.aborted.append(code)


def _fake_mpi(monkeypatch, size=2, initialized=True, finalized=False) -> FakeWorld:
    world = FakeWorld(size)
    mpi = types.SimpleNamespace(COMM_WORLD=world, Is_initialized=lambda: initialized,
                                Is_finalized=lambda: finalized,
                                _set_abort_status=lambda code: world.aborted.append(("at exit",
                                                                                     code)))
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", mpi)
    return world


@pytest.fixture
def hook(monkeypatch):
    """Our hook over a recording 'previous' hook; sys.excepthook restored afterwards."""
    calls = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: calls.append(a))
    monkeypatch.setattr(threading, "excepthook", lambda args: calls.append(args))
    monkeypatch.setattr(sys, "exit", sys.exit)  # restored after the test
    monkeypatch.setattr(abort_on_error, "_exit_status", None)
    monkeypatch.delenv(ABORT_ON_ERROR_VAR, raising=False)
    assert install() is True
    return calls


def test_the_previous_hook_runs_first_then_mpi_abort(hook, monkeypatch, capsys):
    world = _fake_mpi(monkeypatch)
    err = RuntimeError("out of data\nsecond line")
    sys.excepthook(RuntimeError, err, None)
    assert hook == [(RuntimeError, err, None)]
    assert world.aborted == [1]
    host = __import__("socket").gethostname()
    assert capsys.readouterr().err == (f"chainermn-rt: rank 1 on {host} failed: RuntimeError: "
                                       "out of data ...; aborting the job\n")


class Writes:
    """A stderr that keeps each write() apart, as an unbuffered one (PYTHONUNBUFFERED=1) does."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)

    def flush(self):
        pass


@pytest.mark.parametrize("value", [RuntimeError("out of data"),
                                   UserError("resume: damaged")])
def test_the_rank_line_before_mpi_abort_is_one_write(hook, monkeypatch, value):
    """mpirun put its MPI_Abort notice between a line and its newline when they came in two
    writes (print() under PYTHONUNBUFFERED=1); each line is written whole."""
    _fake_mpi(monkeypatch)
    monkeypatch.setattr(sys, "stderr", Writes())
    sys.excepthook(type(value), value, None)
    assert len(sys.stderr.writes) == 1 and sys.stderr.writes[0].count("\n") == 1
    assert sys.stderr.writes[0].startswith("chainermn-rt: ")
    assert sys.stderr.writes[0].endswith("\n")


def test_a_failing_previous_hook_still_aborts(monkeypatch, capsys):
    def broken(*_):
        raise OSError("stderr is gone")

    monkeypatch.setattr(sys, "excepthook", broken)
    install()
    world = _fake_mpi(monkeypatch)
    with pytest.raises(OSError):
        sys.excepthook(ValueError, ValueError("x"), None)
    assert world.aborted == [1] and "failed: ValueError: x; aborting" in capsys.readouterr().err


@pytest.mark.parametrize("state", [dict(size=1), dict(initialized=False),
                                   dict(finalized=True)])
def test_no_abort_without_live_mpi_ranks_to_end(hook, monkeypatch, capsys, state):
    world = _fake_mpi(monkeypatch, **state)
    sys.excepthook(ValueError, ValueError("x"), None)
    assert world.aborted == [] and len(hook) == 1 and capsys.readouterr().err == ""


def test_a_process_without_mpi_is_unaffected(hook, monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    sys.excepthook(ValueError, ValueError("x"), None)
    assert len(hook) == 1 and capsys.readouterr().err == ""
    assert "mpi4py.MPI" not in sys.modules  # the hook never imports MPI itself


def test_install_is_idempotent_and_the_switch_turns_it_off(hook, monkeypatch):
    mine = sys.excepthook
    assert install() is True and sys.excepthook is mine  # once
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    assert install({ABORT_ON_ERROR_VAR: "0"}) is False
    assert sys.excepthook is sys.__excepthook__ and not abort_on_error.installed()


@pytest.mark.parametrize("value", ["no", "false", "2", "0 1", "off"])
def test_a_bad_switch_value_names_the_variable(value):
    with pytest.raises(UserError) as err:
        abort_on_error.enabled({ABORT_ON_ERROR_VAR: value})
    message = str(err.value)
    assert message.startswith(f"environment variable {ABORT_ON_ERROR_VAR}=")
    assert "allowed:" in message and "\n" not in message


def test_failure_line_is_one_line():
    assert failure_line(3, "n1", KeyError, KeyError()) == \
        "chainermn-rt: rank 3 on n1 failed: KeyError; aborting the job"
    assert failure_line(0, "n1", SystemError, SystemError("a\nb")).count("\n") == 0


# -- the per-rank step's PYTHONPATH --------------------------------------------------------------
@pytest.mark.parametrize("before, after", [
    (None, "{d}"),
    ("", "{d}"),
    ("/mine", "{d}:/mine"),
    (":/mine", "{d}::/mine"),        # an empty entry (the working directory) stays
    ("{d}:/mine", None),             # already there: unchanged
])
def test_rank_env_puts_our_folder_first_and_keeps_the_users(before, after):
    environ = {} if before is None else {"PYTHONPATH": before.format(d=PYTHONPATH_DIR)}
    expected = {} if after is None else {"PYTHONPATH": after.format(d=PYTHONPATH_DIR)}
    assert rank_env(environ) == expected
    assert rank_env({**environ, ABORT_ON_ERROR_VAR: "0"}) == {}


def test_pythonpath_dir_holds_only_sitecustomize():
    assert sorted(p.name for p in PYTHONPATH_DIR.iterdir() if p.name != "__pycache__") == \
        ["sitecustomize.py"]


def test_rank_step_hands_the_command_the_pythonpath(tmp_path):
    code = "import os; print(os.environ.get('PYTHONPATH'))"
    argv = [PYTHON, "-m", "chainermn_rt", "rank", "--", PYTHON, "-c", code]
    on = subprocess.run(argv, env=_env(PYTHONPATH="/mine"), capture_output=True, text=True,
                        cwd=REPO, timeout=120)
    assert on.stdout.strip() == f"{PYTHONPATH_DIR}:/mine", on.stderr
    off = subprocess.run(argv, env=_env(PYTHONPATH="/mine", **{ABORT_ON_ERROR_VAR: "0"}),
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert off.stdout.strip() == "/mine", off.stderr
    bad = subprocess.run(argv, env=_env(**{ABORT_ON_ERROR_VAR: "yes"}), capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert bad.stderr.splitlines() == [
        f"chainermn-rt rank: error: environment variable {ABORT_ON_ERROR_VAR}='yes'; allowed: "
        "1 (the default: a failing rank aborts the job) or 0 (off)"]


# -- sitecustomize ------------------------------------------------------------------------------
INSTALLED = "from chainermn_rt.abort_on_error import installed; print(installed())"


def test_sitecustomize_installs_the_hook_unless_switched_off(tmp_path):
    assert _python(INSTALLED, _env(PYTHONPATH=str(PYTHONPATH_DIR))).stdout == "True\n"
    off = _env(PYTHONPATH=str(PYTHONPATH_DIR), **{ABORT_ON_ERROR_VAR: "0"})
    assert _python(INSTALLED, off).stdout == "False\n"
    assert _python(INSTALLED, _env()).stdout == "False\n"  # not on the path: not installed


def test_sitecustomize_with_a_bad_switch_warns_and_python_still_runs():
    proc = _python("print('ran')", _env(PYTHONPATH=str(PYTHONPATH_DIR),
                                        **{ABORT_ON_ERROR_VAR: "maybe"}))
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert proc.stderr.startswith("chainermn-rt: warning: abort-on-error hook not installed: "
                                  f"environment variable {ABORT_ON_ERROR_VAR}='maybe'")


def test_the_sitecustomize_it_hides_still_runs_and_its_hook_chains(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import sys\nprint('their sitecustomize ran', flush=True)\nprevious = sys.excepthook\n"
        "def hook(*a):\n    print('their hook', flush=True)\n    previous(*a)\n"
        "sys.excepthook = hook\n")
    env = _env(PYTHONPATH=f"{PYTHONPATH_DIR}:{theirs}")
    proc = _python("import sitecustomize as s; print(s.hidden.__file__); raise KeyError('k')",
                   env)
    assert proc.stdout.splitlines() == ["their sitecustomize ran", str(theirs / "sitecustomize.py"),
                                        "their hook"]
    assert proc.returncode == 1 and proc.stderr.endswith("KeyError: 'k'\n")  # no MPI: as usual


def test_sys_exit_with_a_status_aborts_at_exit_instead_of_finalising(hook, monkeypatch, capsys):
    world = _fake_mpi(monkeypatch)
    with pytest.raises(SystemExit):
        sys.exit(0)
    abort_on_error._abort_at_exit()
    assert world.aborted == [] and capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as raised:
        sys.exit(3)
    assert raised.value.code == 3 and world.aborted == []  # not before the process exits
    abort_on_error._abort_at_exit()
    assert world.aborted == [("at exit", 3)]
    assert "chainermn-rt: rank 1 on " in capsys.readouterr().err


def test_an_uncaught_exception_in_a_thread_aborts(hook, monkeypatch, capsys):
    world = _fake_mpi(monkeypatch)
    thread = threading.Thread(target=lambda: 1 / 0, name="loader")
    thread.start()
    thread.join()
    assert world.aborted == [1] and len(hook) == 1  # the previous thread hook ran first
    assert "failed in thread 'loader': ZeroDivisionError" in capsys.readouterr().err


@pytest.mark.parametrize("everywhere", [False, True])
def test_a_user_error_is_one_line_and_aborts_with_status_2(hook, monkeypatch, capsys,
                                                           everywhere):
    from chainermn_rt.snapshots import SnapshotError

    world = _fake_mpi(monkeypatch)  # rank 1
    slept = []
    monkeypatch.setattr(abort_on_error, "EVERYWHERE_WAIT_S", 0.05)
    monkeypatch.setattr(abort_on_error.time, "sleep", slept.append)
    error = SnapshotError("resume: snapshot x: manifest.json: missing", everywhere=everywhere)
    sys.excepthook(SnapshotError, error, None)
    err = capsys.readouterr().err
    assert world.aborted == [2] and hook == []  # no traceback
    # an error every rank raised: rank 1 leaves the line and the abort to rank 0, and does
    # both itself only when rank 0 has not ended the job in EVERYWHERE_WAIT_S (here it cannot)
    assert bool(slept) is everywhere
    assert err == "chainermn-rt: error: resume: snapshot x: manifest.json: missing\n"


@pytest.mark.mpi
def test_a_user_error_every_rank_raises_is_printed_once_even_when_rank_0_is_last():
    """Rank 1 raises at once, rank 0 two seconds later: rank 1 must not abort the job before
    rank 0 has printed the line."""
    code = ("import sys, time; from mpi4py import MPI; from chainermn_rt import abort_on_error; "
            "from chainermn_rt.errors import UserError; abort_on_error.install(); "
            "time.sleep(2 if MPI.COMM_WORLD.Get_rank() == 0 else 0); "
            "raise UserError('--n-class: 2; allowed: at least 3', everywhere=True)")
    proc = subprocess.run(mpirun_argv(2) + [PYTHON, "-c", code], env=_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "chainermn-rt" in line] == [
        "chainermn-rt: error: --n-class: 2; allowed: at least 3"], proc.stderr


@pytest.mark.mpi
def test_a_user_error_in_a_one_rank_job_exits_2_in_one_line():
    """A one-rank job resuming a two-rank set: nothing to abort, still bad input's status."""
    code = ("import sys; from mpi4py import MPI; from chainermn_rt import abort_on_error; "
            "from chainermn_rt.errors import UserError; abort_on_error.install(); "
            "sys.stdout.write('out'); raise UserError('resume: snapshot x: world_size: written "
            "by 2 ranks', everywhere=True)")
    proc = _python(code, _env())
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "out", "chainermn-rt: error: resume: snapshot x: world_size: written by 2 ranks\n")


def test_an_exception_without_mpi_is_reported_as_usual():
    code = "import sys; sys.stdout.write('out'); raise ValueError('plain')"
    with_hook = _python(code, _env(PYTHONPATH=str(PYTHONPATH_DIR)))
    without = _python(code, _env())
    assert (with_hook.returncode, with_hook.stdout) == (without.returncode, without.stdout) == \
        (1, "out")
    assert with_hook.stderr == without.stderr and "chainermn-rt" not in with_hook.stderr


# -- real ranks (mpirun): rank 1 fails while rank 0 waits in an allreduce ------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("args, line", [
    ([], LINE), (["--setup"], LINE),
    (["--how", "exit"], "chainermn-rt: rank 1 on {host} exited with status 3; aborting the job"),
    (["--how", "thread"], "chainermn-rt: rank 1 on {host} failed in thread 'loader': "
                          "RuntimeError: rank 1's loader fails on purpose; aborting the job")],
    ids=["plain", "setup", "exit", "thread"])
def test_a_failing_rank_under_the_rank_step_ends_mpirun(args, line):
    """The 120 s timeout only stops a hang from blocking the suite; it is not a speed check."""
    argv = mpirun_argv(2) + [PYTHON, "-m", "chainermn_rt", "rank", "--", PYTHON, FAIL, *args]
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode != 0
    host = __import__("socket").gethostname()
    assert line.format(host=host) in proc.stderr.splitlines(), proc.stderr
    assert "second allreduce returned" not in proc.stdout
    assert ("Traceback" in proc.stderr) is ("failed" in line)  # an exception is reported first


def test_setup_installs_the_same_hook_unless_switched_off():
    code = "import chainermn_rt; chainermn_rt.setup('naive'); " + INSTALLED
    assert _python(code, _env()).stdout == "True\n"
    assert _python(code, _env(**{ABORT_ON_ERROR_VAR: "0"})).stdout == "False\n"


def test_the_variable_is_documented():
    docs = (REPO / "docs" / "site-profiles.md").read_text()
    assert f"`{ABORT_ON_ERROR_VAR}`" in docs
    assert os.path.isfile(PYTHONPATH_DIR / "sitecustomize.py")
