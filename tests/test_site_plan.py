"""Site profiles, plans and their errors: the field and what is allowed, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import SLOTS_VAR, dump_slots, parse_cpu_list
from chainermn_rt.site import load_site, parse_site

from conftest import REPO

SITES = REPO / "slurm" / "sites"


def _site(name):
    return load_site(SITES / f"{name}.toml")


@pytest.mark.parametrize("path", sorted(SITES.glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_profiles_validate(path):
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "check", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert ": ok: site" in proc.stdout


def test_dgx_plan_maps_ranks_to_gpus_numa_and_hcas():
    plan = make_plan(_site("dgx-h100"), Request(nodes=4, command=("x",)))
    assert (plan.tasks_per_node, plan.cpus_per_task, plan.gpus_per_node) == (8, 14, 8)
    assert plan.world_size == 32
    env = dict(plan.environment)
    import json

    slots = json.loads(env[SLOTS_VAR])
    assert [s["numa"] for s in slots] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert slots[5] == {"gpu": 5, "numa": 1, "cpus": "70-83", "hcas": ["mlx5_9:1"]}
    assert ("gpus-per-node", "h100:8") in plan.sbatch


def test_fewer_gpus_keep_cpus_per_gpu():
    plan = make_plan(_site("quad-gpu"), Request(nodes=1, gpus_per_node=2, command=("x",)))
    assert (plan.tasks_per_node, plan.cpus_per_task) == (2, 8)


def test_one_gpu_per_node_carries_every_slot_of_the_node():
    """Slurm may give the job any GPU (e.g. GPU 5): its rank must find that GPU's slot."""
    site = _site("dgx-h100")
    plan = make_plan(site, Request(nodes=2, gpus_per_node=1, command=("x",)))
    assert plan.tasks_per_node == 1
    assert dict(plan.environment)[SLOTS_VAR] == dump_slots(site.partition(None).topology.slots)


def test_request_env_overrides_profile_and_socket_ifname_fills_nccl_and_ompi():
    plan = make_plan(_site("quad-gpu"), Request(nodes=1, command=("x",),
                                                env=(("OMPI_MCA_pml", "ob1"),)))
    env = dict(plan.environment)
    assert env["OMPI_MCA_pml"] == "ob1"
    assert env["NCCL_SOCKET_IFNAME"] == env["OMPI_MCA_oob_tcp_if_include"] == "ib0"


@pytest.mark.parametrize("request_kw, message", [
    (dict(nodes=3), "--nodes: 3 on partition 'gpu'; allowed: 1-2"),
    (dict(nodes=1, gpus_per_node=5), "--gpus-per-node: 5 on partition 'gpu' of site 'sandbox'; "
                                     "allowed: 1-4"),
    (dict(nodes=1, time="1:00:00"), "--time: 1:00:00 is over partition 'gpu''s limit; "
                                    "allowed: up to 00:30:00"),
    (dict(nodes=1, time="soon"), "--time: 'soon' is not a Slurm time"),
    (dict(nodes=1, partition="big"), "partition: 'big' is not in site 'sandbox'; allowed: gpu, "
                                     "cpu"),
    (dict(nodes=1, runtime="docker"), "--runtime: 'docker' is not known; allowed: none | "
                                      "apptainer | singularity | charliecloud | pyxis"),
    (dict(nodes=1, runtime="apptainer"), "--image: runtime 'apptainer' needs an image"),
    (dict(nodes=1, partition="cpu", gpus_per_node=1), "--gpus-per-node: partition 'cpu' of "
                                                      "site 'sandbox' has no GPUs"),
    (dict(nodes=1, ranks_per_node=2), "--ranks-per-node: partition 'gpu' has GPUs"),
    (dict(nodes=1, memory="3G"), "--mem: 3G is more than a node of partition 'gpu' has"),
    (dict(nodes=1, job_name="two\nlines"), "--job-name: 'two\\nlines' contains a control"),
    (dict(nodes=1, env=(("1BAD", "x"),)), "--env: '1BAD' is not a variable name"),
    (dict(nodes=1, launcher="ssh"), "--launcher: 'ssh' is not known; allowed: srun | mpirun"),
])
def test_impossible_requests_are_refused(request_kw, message):
    request_kw.setdefault("command", ("x",))
    with pytest.raises(UserError) as err:
        make_plan(_site("sandbox"), Request(**request_kw))
    assert message in str(err.value)


GOOD = (SITES / "quad-gpu.toml").read_text()


@pytest.mark.parametrize("edit, message", [
    (("launcher = \"srun\"", "launcher = \"ssh\""), "launcher: 'ssh' is not allowed; allowed: "
                                                    "srun | mpirun"),
    (("nodes = 32", "nodes = 0"), "partitions[0].nodes: 0 is not allowed; allowed: an integer"),
    (("nodes = 32", "nodes = \"32\""), "partitions[0].nodes: '32' has the wrong type"),
    (("topology = \"quad\"", "topology = \"octo\""), "partitions[0].topology: 'octo' is not "
                                                     "defined; allowed: quad"),
    (("runtime = \"apptainer\"", "runtime = \"podman\""), "container.runtime: 'podman' is not "
                                                          "allowed"),
    (("max_time = \"1-00:00:00\"", "max_time = \"a day\""), "partitions[0].max_time: 'a day' "
                                                            "is not a Slurm time"),
    (("cpus = \"8-15\"", "cpus = \"8 to 15\""), "topology.quad.slots[1].cpus: '8 to 15' is not "
                                                "allowed"),
    (("hcas = [\"mlx5_0:1\"] },\n  { gpu = 1", "hcas = [\"mlx5_0\"] },\n  { gpu = 1"),
     "topology.quad.slots[0].hcas[0]: 'mlx5_0' is not allowed; allowed: an HCA with its port"),
    (("gpu = 3,", "gpu = 7,"), "topology.quad.slots: gpu indices [0, 1, 2, 7]; allowed: each of "
                               "0..3 once"),
    (("signal = \"USR2@90\"", "signal = \"soon\""), "signal: 'soon' is not allowed"),
    (("signal = \"USR2@90\"", "signal = \"USR2@90\"\ngrace_time = 60"),
     "grace_time: 60 s is shorter than the lead of signal = \"USR2@90\"; allowed: at least 90 s "
     "(the signal must come before the grace time ends)"),
    (("signal = \"USR2@90\"", "signal = \"USR2@90\"\ngrace_time = 0"),
     "grace_time: 0 is not allowed; allowed: whole seconds 1-65535"),
    (("signal = \"USR2@90\"", "signal = \"USR2@90\"\ngrace_time = \"2m\""),
     "grace_time: '2m' has the wrong type; allowed: whole seconds 1-65535"),
    (("requeue = true", "requeue = true\nrequeu = true"), "requeu: unknown field; allowed:"),
    (("cpus_per_node = 32", "cpus_per_node = 2"), "partitions[0].cpus_per_node: 2 is fewer than "
                                                  "the 4 slots"),
    # issue 25: five malformed profiles `render` accepted
    (("socket_ifname = \"ib0\"", "socket_ifname = \"\""), "socket_ifname: '' is empty; allowed: "
                                                          "a network interface's name"),
    (("modules = [", "python = \" \"\nmodules = ["), "python: ' ' is empty; allowed: the "
                                                    "interpreter's path or name on the compute "
                                                    "nodes"),
    (("python = \"python3\"", "python = \"\""), "container.python: '' is empty; allowed: the "
                                                "interpreter's path or name in the image"),
    (("cpus = \"24-31\"", "cpus = \"31-24\""), "topology.quad.slots[3].cpus: '31-24' is not "
                                               "allowed; allowed: a CPU list such as"),
    (("cpus = \"24-31\"", "cpus = \"24-32\""), "topology.quad.slots[3].cpus: '24-32' names CPU 32"
                                               ", past partition 'gpu''s cpus_per_node = 32; "
                                               "allowed: CPUs 0-31"),
    (("nodes = 32", "nodes = 18446744073709551616"), "partitions[0].nodes: 18446744073709551616 "
                                                     "is not allowed; allowed: an integer "
                                                     "1-1000000"),
    (("nodes = 32", "nodes = 9223372036854775807"), "partitions[0].nodes: 9223372036854775807 is "
                                                    "not allowed; allowed: an integer 1-1000000"),
    (("cpus_per_node = 32", "cpus_per_node = 65537"), "partitions[0].cpus_per_node: 65537 is not "
                                                      "allowed; allowed: an integer 1-65536"),
    (("cpus = \"24-31\"", "cpus = \"24-99999\""), "topology.quad.slots[3].cpus: '24-99999' is "
                                                  "not allowed"),
    (("cpus = \"24-31\"", "cpus = \"24-\u0663\""), "topology.quad.slots[3].cpus: '24-\u0663' "
                                                    "is not allowed"),  # Arabic-Indic 3
    (("memory = \"256G\"", "memory = \"99999999999999T\""), "partitions[0].memory: "
                                                          "99999999999999T is more than a node "
                                                          "has; allowed: at most 1024T"),
    (("numa = 1, cpus = \"24", "numa = 99999999, cpus = \"24"), "topology.quad.slots[3].numa: "
                                                             "99999999 is not allowed; allowed: "
                                                             "an integer 0-65535"),
])
def test_profile_errors_name_the_field(tmp_path, edit, message):
    old, new = edit
    assert old in GOOD
    path = tmp_path / "site.toml"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(UserError) as err:
        load_site(path)
    assert f"{path}: {message}" in str(err.value)


def test_not_toml_is_one_clear_error(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text("name = [")
    with pytest.raises(UserError, match="not valid TOML"):
        load_site(path)


def test_parse_site_requires_partitions():
    with pytest.raises(UserError, match="partitions: missing"):
        parse_site({"name": "x", "launcher": "srun", "topology": {}}, REPO)


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "chainermn_rt", *args], capture_output=True,
                          text=True, cwd=cwd)


@pytest.mark.parametrize("args, field", [
    (["render", "--site", "sandbox", "--nodes", "9", "--", "x"], "--nodes"),
    (["render", "--site", "sandbox", "--nodes", "two", "--", "x"], "--nodes"),
    (["render", "--site", "nowhere", "--nodes", "1", "--", "x"], "--site"),
    (["render", "--site", "sandbox", "--nodes", "1", "--env", "NOEQUALS", "--", "x"], "--env"),
    (["render", "--site", "sandbox", "--nodes", "1"], "COMMAND"),
    (["render", "--site", "sandbox", "--nodes", "1", "--bogus", "--", "x"], "--bogus"),
    (["site", "check", "missing.toml"], "FILE"),  # the argument the user gave
])
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, field):
    out = tmp_path / "job.sh"
    proc = _cli(*args[:1], "--output", str(out), *args[1:]) if args[0] == "render" \
        else _cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_render_writes_an_executable_script(tmp_path):
    out = tmp_path / "job.sh"
    proc = _cli("render", "--site", "sandbox", "--nodes", "2", "--output", str(out), "--",
                "hostname")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("#!/bin/bash\n") and out.stat().st_mode & 0o100
    dry = _cli("render", "--site", "sandbox", "--nodes", "2", "--dry-run", "--output",
               str(tmp_path / "other.sh"), "--", "hostname")
    assert dry.returncode == 0 and dry.stdout == out.read_text()
    assert not (tmp_path / "other.sh").exists()


def _with_sbatch(tmp_path, site_table="", partition_table=""):
    """quad-gpu.toml with `sbatch = {...}` at the top level and in its partition."""
    text = GOOD
    if site_table:
        text = text.replace("requeue = true\n", f"requeue = true\nsbatch = {{ {site_table} }}\n")
    if partition_table:
        text = text.replace('topology = "quad"\n',
                            f'topology = "quad"\nsbatch = {{ {partition_table} }}\n', 1)
    path = tmp_path / "site.toml"
    path.write_text(text)
    return load_site(path)


def test_sbatch_tables_follow_the_plans_options_and_the_partitions_win(tmp_path):
    site = _with_sbatch(tmp_path, 'constraint = "ib", exclusive = true, comment = "site"',
                        'comment = "gpu partition", reservation = "maint"')
    plan = make_plan(site, Request(nodes=1, command=("x",)))
    own = [o for o, _ in make_plan(_site("quad-gpu"), Request(nodes=1, command=("x",))).sbatch]
    assert [o for o, _ in plan.sbatch[:len(own)]] == own
    assert plan.sbatch[len(own):] == (("constraint", "ib"), ("exclusive", None),
                                      ("comment", "gpu partition"), ("reservation", "maint"))


def test_the_plans_own_options_cannot_be_set_in_a_profile():
    from chainermn_rt.sbatch_options import PLAN_OPTIONS

    for name in ("dgx-h100", "quad-gpu", "cpu-cluster"):
        site = _site(name)
        plan = make_plan(site, Request(nodes=1, command=("x",), memory="1G", account="a",
                                       qos="q"))
        extra = {o for o, _ in site.sbatch + site.partition(None).sbatch}
        assert {o for o, _ in plan.sbatch} - extra <= set(PLAN_OPTIONS)


@pytest.mark.parametrize("site_table, partition_table, message", [
    ('time = "1:00:00"', "", "sbatch.time: chainermn-rt sets this option; allowed: --time"),
    ('partitio = "debug"', "", "sbatch.partitio: chainermn-rt sets --partition, which sbatch "
                              "takes this for; allowed: --partition"),
    ("", 'outpu = "x.log"', "partitions[0].sbatch.outpu: chainermn-rt sets --output, which "
                           "sbatch takes this for; allowed: --log"),
    ('gpus-per = "2"', "", "sbatch.gpus-per: chainermn-rt sets --gpus-per-node"),
    ("", "ntasks = \"8\"", "partitions[0].sbatch.ntasks: chainermn-rt sets this option; "
                           "allowed: --gpus-per-node or --ranks-per-node"),
    ('output = "x.out"', "", "sbatch.output: chainermn-rt sets this option; allowed: --log"),
    ('gres = "nvme:1,gpu:4"', "", "sbatch.gres: 'nvme:1,gpu:4' requests GPUs; allowed: other "
                                  "GRES only"),
    ('Constraint = "ib"', "", "sbatch.Constraint: not an sbatch option name; allowed: its long "
                              "name without --"),
    ('"--constraint" = "ib"', "", "sbatch.--constraint: not an sbatch option name"),
    ('C = "ib"', "", "sbatch.C: not an sbatch option name"),
    ("nice = 10", "", "sbatch.nice: 10 has the wrong type; allowed: a non-empty string (quote "
                      "numbers), or true for an option without a value"),
    ("", "exclusive = false", "partitions[0].sbatch.exclusive: False is not allowed; allowed: "
                              "a non-empty string"),
    ('comment = ""', "", "sbatch.comment: '' is not allowed"),
    ('comment = "a\\nb"', "", "sbatch.comment: 'a\\nb' contains a control character; "
                              "allowed: printable text"),
    ("", 'comment = "tab\\there"', "partitions[0].sbatch.comment: 'tab\\there' contains a "
                                   "control character"),
])
def test_sbatch_table_errors_name_the_field(tmp_path, site_table, partition_table, message):
    with pytest.raises(UserError) as err:
        _with_sbatch(tmp_path, site_table, partition_table)
    assert f"{tmp_path / 'site.toml'}: {message}" in str(err.value)


def test_sbatch_must_be_a_table(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(GOOD.replace("requeue = true\n", "requeue = true\nsbatch = \"exclusive\"\n"))
    with pytest.raises(UserError, match="sbatch: 'exclusive' has the wrong type; allowed: a "
                                        "table"):
        load_site(path)


def test_the_job_log_is_named_log():
    with pytest.raises(UserError, match="--log: 'a\\\\nb' contains a control character"):
        make_plan(_site("sandbox"), Request(nodes=1, command=("x",), log="a\nb"))
    proc = _cli("render", "--site", "quad-gpu", "--nodes", "1", "--log", "train-%j.log", "--",
                "x")
    assert proc.returncode == 0 and "#SBATCH --output=train-%j.log\n" in proc.stdout


# -- profiles read with a bound (issue 25) ------------------------------------------------------
def _profile_path(tmp_path, kind):
    """A profile path naming what is not a profile file: a device, a FIFO, a folder, a huge
    file (sparse: no disk used), a link to a device."""
    path = tmp_path / "site.toml"
    if kind == "device":
        return "/dev/zero"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to read would wait for a writer forever
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(64 << 30)
    else:
        path.symlink_to("/dev/zero")
    return str(path)


@pytest.mark.parametrize("kind, what", [("device", "a device"), ("fifo", "a FIFO"),
                                        ("folder", "a folder"), ("huge", "larger than 1048576 "
                                                                         "bytes"),
                                        ("link", "a device")])
def test_chainermn_rt_site_naming_no_profile_file_is_one_line(tmp_path, kind, what):
    path = _profile_path(tmp_path, kind)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "render", "--nodes", "1", "--",
                           "x"], capture_output=True, text=True, cwd=work, timeout=60,
                          env={**os.environ, "CHAINERMN_RT_SITE": path})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"chainermn-rt render: error: --site: {path}: {what}, not a "
                                  "file; allowed: a site profile (.toml), a file of at most 1 "
                                  "MiB, or a shipped one: ") if kind != "huge" else \
        proc.stderr.startswith(f"chainermn-rt render: error: --site: {path}: {what}; allowed: ")
    assert proc.stderr.count("\n") == 1 and list(work.iterdir()) == []


@pytest.mark.parametrize("text, why", [
    ("7-0", "7-0 is reversed"), ("0-65536", "CPU 65536 is past 65535"),
    ("0-65535,0-1", "more than 65536 CPUs"), ("0-\u0663", None), ("1,,2", None), ("", None),
    ("0-99999999999", None)])
def test_cpu_lists_are_bounded_and_ascending(text, why):
    with pytest.raises(ValueError) as err:
        parse_cpu_list(text)
    assert f"is not a CPU list{f' ({why})' if why else ''}; allowed: a CPU list" in \
        str(err.value)
    assert parse_cpu_list("0-3,8") == [0, 1, 2, 3, 8]
