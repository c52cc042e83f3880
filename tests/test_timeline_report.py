"""``chainermn-rt report``'s page in a real headless browser (Debian's chromium, installed here
by apt when missing; the test fails, never skips, when it cannot be): it loads with no console
message, and each plot is there, decoded, and not blank in a screenshot (Pillow reads the
pixels)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest
from PIL import Image
from timeline_fakes import write_run

from chainermn_rt import cli
from chainermn_rt.timeline import merge, report

PLOTS = ("throughput", "step-time", "phases", "slowest", "exchange", "efficiency")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0"]
# What the page's script-less HTML is given to tell where its plots are (a copy; the page
# itself has no script): each figure's box and its image's decoded size, and the page height.
MEASURE = """<script>
document.body.insertAdjacentHTML("beforeend", "<pre id=measured>" + JSON.stringify({
  height: document.documentElement.scrollHeight,
  plots: [...document.querySelectorAll("figure.plot")].map(f => {
    const img = f.querySelector("img"), r = img.getBoundingClientRect();
    return {id: f.id, x: r.x, y: r.y + window.scrollY, w: r.width, h: r.height,
            natural: img.naturalWidth};
  })}) + "</pre>");
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if os.geteuid() != 0:
            pytest.fail("chromium is missing and this is not root: apt-get install chromium",
                        pytrace=False)
        for argv in (["apt-get", "update", "-qq"],
                     ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            if proc.returncode != 0:
                pytest.fail(f"{' '.join(argv)} failed: {proc.stderr[-2000:]}", pytrace=False)
        path = shutil.which("chromium")
        if path is None:
            pytest.fail("apt-get installed chromium, but no chromium command is found",
                        pytrace=False)
    return path


def browse(chromium: str, tmp_path: Path, page: Path, *args: str) -> tuple[str, list[str]]:
    """Run chromium on ``page`` with a fresh profile; (stdout, its console lines)."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    proc = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]


def blank(box: Image.Image) -> bool:
    """A region with (almost) one colour: under 1 % of its pixels differ from its commonest."""
    pixels = numpy.asarray(box.convert("RGB")).reshape(-1, 3)
    _, counts = numpy.unique(pixels, axis=0, return_counts=True)
    return counts.max() > 0.99 * len(pixels)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    rng = numpy.random.default_rng(3)
    compute = rng.uniform(9_000, 11_000, (4, 120))
    compute[3] *= 1.5
    write_run(tmp / "timeline" / "8", compute, hosts={0: "node1", 1: "node1", 2: "node2",
                                                      3: "node2"})
    write_run(tmp / "timeline" / "7", compute[:2] * 0.9, hosts={0: "node1", 1: "node1"})
    out = tmp / "report.html"
    status = cli.main(["report", str(tmp / "timeline" / "8"), "--output", str(out),
                       "--reference", str(tmp / "timeline" / "7")])
    assert status == 0
    return out


def test_the_page_loads_without_console_messages_and_shows_every_plot(chromium, page,
                                                                       tmp_path):
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # nothing fetched
    assert "<script" not in text
    _, console = browse(chromium, tmp_path, page, "--dump-dom")
    assert console == []

    measured = tmp_path / "measured.html"
    measured.write_text(text.replace("</body>", MEASURE + "</body>"))
    dom, console = browse(chromium, tmp_path, measured, "--window-size=1000,800", "--dump-dom")
    assert console == []
    found = json.loads(re.search(r"<pre id=\"measured\">(.*?)</pre>", dom, re.S).group(1))
    assert [p["id"] for p in found["plots"]] == [f"plot-{name}" for name in PLOTS]
    assert all(p["natural"] > 0 and p["w"] > 300 and p["h"] > 100 for p in found["plots"])

    shot = tmp_path / "shot.png"
    browse(chromium, tmp_path, measured, f"--window-size=1000,{found['height']}",
           f"--screenshot={shot}")
    image = Image.open(shot)
    assert image.size == (1000, found["height"])
    for p in found["plots"]:
        box = image.crop((int(p["x"]), int(p["y"]), int(p["x"] + p["w"]), int(p["y"] + p["h"])))
        assert not blank(box), f"{p['id']} is blank in the screenshot"
    margin = image.crop((0, int(found["plots"][0]["y"]), 20, int(found["plots"][-1]["y"])))
    assert blank(margin)  # the check sees a blank region as blank


def test_a_console_message_is_seen(chromium, tmp_path):
    """The console check above would see a page's error."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('seen')</script>"
                   "</body></html>")
    _, console = browse(chromium, tmp_path, bad, "--dump-dom")
    assert len(console) == 1 and '"seen"' in console[0]


def test_the_page_names_the_slow_rank_and_the_efficiency(page):
    text = page.read_text()
    assert "slow node</th><td>rank 3 on node2: compute 1.4" in text
    run = merge.load(page.parent / "timeline" / "8")
    ref = merge.load(page.parent / "timeline" / "7")
    this = report.Summary.of(run, merge.tables(run))
    other = report.Summary.of(ref, merge.tables(ref))
    assert (this.ranks, this.nodes, other.nodes) == (4, 2, 1)
    assert f"{report.efficiency(this, other):.1%} against" in text
