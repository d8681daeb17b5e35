"""``envforge matrix`` opened in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``) through ``file://``: cells and counts drawn, filters change the rows,
a click opens the step timings and the failing step, hostile report text stays text.

Evidence: one real ``envforge probe --report`` run on this machine plus reports made with
the real ProbeReport / certificate classes for GPUs this machine does not have. With
``ENVFORGE_REQUIRE_ENGINE=1`` (CI) a missing browser or driver fails these tests.

The screenshots are written to ``$ENVFORGE_MATRIX_SHOTS`` (default: a ``envforge-matrix``
folder in the temporary directory) and their paths are printed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from envforge.probe.report import ProbeReport, ReportGpu, ReportHost, StepResult
from envforge.probe.spec import FULL_STEPS
from envforge.publish.certificate import issue

from .helpers import Envforge, unavailable

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
XSS = (
    '</script><script>document.body.setAttribute("data-pwned","1")</script>'
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
)
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=timezone.utc)
#: (vendor, arch, product, driver, recipe, outcomes)
FLEET = (
    (
        "amd",
        "gfx1031",
        "AMD Radeon RX 6700 XT",
        "amdgpu 6.8.0",
        "gfx1031",
        ("pass", "pass", "pass", "hang"),
    ),
    ("amd", "gfx1031", "AMD Radeon RX 6700 XT", "amdgpu 6.10.5", "gfx1030", ("pass", "crash")),
    (
        "amd",
        "gfx1010",
        "AMD Radeon RX 5700 XT",
        "amdgpu 6.2.4",
        "gfx1010",
        ("pass", "fail", "no-device"),
    ),
    ("nvidia", None, "NVIDIA GeForce RTX 4090", "nvidia 580.65.06", "sm_90", ("pass", "pass")),
    ("nvidia", None, "NVIDIA GeForce GTX 1080 Ti", "nvidia 535.183.01", "sm_61", ("fail",)),
)
DETAILS = {
    "fail": "max abs difference vs CPU 0.37 > 1e-3",
    "hang": "no result within 180 s",
    "crash": XSS,
    "no-device": "torch sees no GPU",
}


def _report(
    vendor: str,
    arch: str | None,
    product: str,
    driver: str,
    recipe: str,
    *,
    outcome: str,
    when: datetime,
) -> ProbeReport:
    steps: list[StepResult] = []
    for i, name in enumerate(FULL_STEPS):
        if any(s.status != "pass" for s in steps):
            steps.append(StepResult(name, "skip", 0.0, "not run"))
        elif outcome != "pass" and name == "matmul":
            steps.append(StepResult(name, outcome, 1.25, DETAILS[outcome]))  # type: ignore[arg-type]
        else:
            steps.append(StepResult(name, "pass", 0.1 * (i + 1), "ok"))
    return ProbeReport(
        steps=tuple(steps),
        level="full",
        target="/home/alice/venv/bin/python",
        host=ReportHost(
            "Linux 6.8.0-45-generic", "x86_64", (ReportGpu(product, arch, vendor),), driver
        ),
        envforge_version="0.1.0",
        created=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        seconds=sum(s.seconds for s in steps),
        recipe_name=recipe,
        recipe_hash="sha256:" + "ab" * 32,
        snapshot={"torch": "2.13.0+rocm7.1", "hip": "7.1.1", "python": "3.12.4"},
    )


@dataclass(frozen=True)
class Site:
    folder: Path
    index: Path
    data: dict[str, Any]


@pytest.fixture(scope="module")
def site(envforge: Envforge, tmp_path_factory: pytest.TempPathFactory) -> Site:
    evidence = tmp_path_factory.mktemp("matrix-evidence")
    # A real probe of this machine's interpreter (CPU, or the GPU torch sees).
    probed = envforge("probe", "--level", "quick", "--report", str(evidence / "real"), timeout=600)
    assert (evidence / "real" / "probe.json").is_file(), probed.stderr[-3000:]
    n = 0
    for vendor, arch, product, driver, recipe, outcomes in FLEET:
        for outcome in outcomes:
            when = T0 + timedelta(days=n)
            report = _report(vendor, arch, product, driver, recipe, outcome=outcome, when=when)
            folder = evidence / f"run-{n}"
            report.write(folder)
            if n % 2 == 0:  # half of them certified as well: the same run twice
                cert = issue(
                    report=report.to_dict(),
                    recipe_name=recipe,
                    recipe_hash="sha256:" + "ab" * 32,
                    stack_tag="torch2.13.0-x",
                    layers=["sha256:" + "01" * 32],
                    config={},
                    candidate_id="c",
                    now=when.timestamp(),
                )
                (folder / "certificate.json").write_text(cert.to_json(), encoding="utf-8")
            n += 1
    (evidence / "broken.json").write_text('{"schema": "envforge.probe/1", "steps": [', "utf-8")
    out = tmp_path_factory.mktemp("matrix-site") / "site"
    done = envforge("matrix", "--evidence", str(evidence), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"envforge: skipped {evidence / 'broken.json'}: not JSON: "
        "Expecting value: line 1 column 42 (char 41)"
    ]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["reports"] == n + 1
    data = json.loads((out / "matrix.json").read_text(encoding="utf-8"))
    return Site(out, out / "index.html", data)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        unavailable("no chromium on PATH (apt-get install chromium chromium-driver)")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(
        os.environ.get("ENVFORGE_MATRIX_SHOTS") or Path(tempfile.gettempdir()) / "envforge-matrix"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run_chromium(
    chromium: str, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="envforge-chromium-") as profile:
        return subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    text: str = ""


class _Dom(HTMLParser):
    """The dumped DOM, flattened: each element with its attributes and its full text."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[Node] = []
        self.open: list[Node] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.nodes.append(node)
        if tag not in ("meta", "br", "input", "img", "link"):
            self.open.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                break

    def handle_data(self, data: str) -> None:
        for node in self.open:
            node.text += data

    def all(self, tag: str, attr: str | None = None) -> list[Node]:
        return [n for n in self.nodes if n.tag == tag and (attr is None or attr in n.attrs)]


def dom(chromium: str, site: Site, fragment: str = "") -> _Dom:
    url = site.index.as_uri() + (f"#{fragment}" if fragment else "")
    done = _run_chromium(chromium, "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = _Dom()
    parsed.feed(done.stdout)
    body = parsed.all("body")
    assert body, done.stdout[:2000]
    assert body[0].attrs.get("data-ready") == "1", "the page's script did not finish"
    return parsed


def _cell_key(site: Site, arch: str, column: str) -> str:
    row = next(r["key"] for r in site.data["rows"] if r["arch"] == arch)
    return f"{row}|{column}"


def test_cells_and_counts_are_drawn(
    chromium: str, site: Site, shots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = dom(chromium, site)
    rows = [n.attrs["data-row"] for n in page.all("tr", "data-row")]
    assert rows == [r["key"] for r in site.data["rows"]]
    assert {"amd:gfx1010", "amd:gfx1031", "nvidia:sm_89", "nvidia:sm_61"} <= set(rows)
    cells = {n.attrs["data-cell"]: n for n in page.all("button", "data-cell")}
    assert len(cells) == len(site.data["cells"])
    main = cells[_cell_key(site, "gfx1031", "gfx1031")]
    assert "3 pass" in main.text
    assert "1 hang" in main.text
    assert "newest 2026-11-04" in main.text
    assert "amdgpu 6.8.0" in main.text
    assert "verdict-mixed" in main.attrs["class"]
    assert "verdict-pass" in cells[_cell_key(site, "sm_89", "sm_90")].attrs["class"]
    assert "verdict-fail" in cells[_cell_key(site, "sm_61", "sm_61")].attrs["class"]
    summary = next(n for n in page.nodes if n.attrs.get("id") == "summary")
    assert f"of {site.data['reports']:,} reports shown" in summary.text

    shot = shots / "matrix.png"
    fragment = "cell=" + _cell_key(site, "gfx1031", "gfx1031").replace("|", "%7C")
    done = _run_chromium(
        chromium,
        f"--screenshot={shot}",
        "--window-size=1280,900",
        site.index.as_uri() + "#" + fragment,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with capsys.disabled():
        print(f"\nmatrix screenshot: {shot}")


def test_filters_change_the_visible_rows(chromium: str, site: Site) -> None:
    every = [n.attrs["data-row"] for n in dom(chromium, site).all("tr", "data-row")]
    nvidia = dom(chromium, site, "vendor=nvidia")
    assert [n.attrs["data-row"] for n in nvidia.all("tr", "data-row")] == [
        r for r in every if r.startswith("nvidia:")
    ]
    hang = dom(chromium, site, "status=hang")
    assert [n.attrs["data-row"] for n in hang.all("tr", "data-row")] == ["amd:gfx1031"]
    assert [n.attrs["data-cell"] for n in hang.all("button", "data-cell")] == [
        _cell_key(site, "gfx1031", "gfx1031")
    ]
    recipe = dom(chromium, site, "recipe=gfx1030")
    assert [n.attrs["data-column"] for n in recipe.all("th", "data-column")] == ["gfx1030"]


def test_hostile_report_text_is_shown_as_text(chromium: str, site: Site) -> None:
    page = dom(chromium, site, "cell=" + _cell_key(site, "gfx1031", "gfx1030").replace("|", "%7C"))
    body = page.all("body")[0]
    assert "data-pwned" not in body.attrs
    assert page.all("img") == []
    pre = [n for n in page.all("pre") if "failure-detail" in n.attrs.get("class", "")]
    assert pre
    assert pre[0].text == XSS


# --------------------------------------------------------------------------- WebDriver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


@dataclass(frozen=True)
class WebDriver:
    """Just enough of the W3C WebDriver protocol, over HTTP with the stdlib."""

    base: str
    session: str = ""

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        prefix = f"{self.base}/session/{self.session}" if self.session else self.base
        request = urllib.request.Request(
            prefix + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"WebDriver {method} {path}: {exc.read()[:500]!r}") from None

    def find(self, css: str) -> str:
        return str(self.call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        found = self.call("POST", "/elements", {"using": "css selector", "value": css})
        return [str(e[ELEMENT]) for e in found]

    def click(self, element: str) -> None:
        self.call("POST", f"/element/{element}/click", {})

    def text(self, element: str) -> str:
        return str(self.call("GET", f"/element/{element}/text"))

    def displayed(self, element: str) -> bool:
        return bool(self.call("GET", f"/element/{element}/displayed"))


@pytest.fixture(scope="module")
def driver(chromium: str) -> Iterator[WebDriver]:
    binary = shutil.which("chromedriver")
    if not binary:
        unavailable("no chromedriver on PATH (apt-get install chromium-driver)")
    assert binary is not None
    port = _free_port()
    process = subprocess.Popen(
        [binary, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    profile = tempfile.mkdtemp(prefix="envforge-chromium-")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if WebDriver(base).call("GET", "/status").get("ready"):
                    break
            except (OSError, AssertionError):
                pass
            assert time.monotonic() < deadline, "chromedriver did not start"
            time.sleep(0.2)
        created = WebDriver(base).call(
            "POST",
            "/session",
            {
                "capabilities": {
                    "alwaysMatch": {
                        "browserName": "chrome",
                        "goog:chromeOptions": {
                            "binary": chromium,
                            "args": [
                                *FLAGS,
                                f"--user-data-dir={profile}",
                                "--window-size=1280,900",
                            ],
                        },
                    }
                }
            },
        )
        session = WebDriver(base, str(created["sessionId"]))
        try:
            yield session
        finally:
            session.call("DELETE", "")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


def test_clicking_a_cell_and_choosing_a_filter(
    driver: WebDriver, site: Site, shots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    driver.call("POST", "/url", {"url": site.index.as_uri()})
    assert (
        driver.call(
            "POST",
            "/execute/sync",
            {"script": "return document.body.getAttribute('data-ready')", "args": []},
        )
        == "1"
    )
    rows_before = len(driver.find_all("#matrix tbody tr"))
    assert rows_before == len(site.data["rows"])
    assert not driver.displayed(driver.find("#detail"))

    driver.click(driver.find(f'button[data-cell="{_cell_key(site, "gfx1010", "gfx1010")}"]'))
    detail = driver.find("#detail")
    assert driver.displayed(detail)
    text = driver.text(detail)
    assert "Step timings (all 3 runs)" in text
    assert "matmul" in text
    assert "Newest failure: matmul (no device)" in text
    assert "torch sees no GPU" in text
    shot = shots / "matrix-clicked.png"
    shot.write_bytes(base64.b64decode(driver.call("GET", "/screenshot")))
    with capsys.disabled():
        print(f"\nmatrix screenshot (cell clicked): {shot}")

    driver.click(driver.find("#f-vendor"))
    driver.click(driver.find('#f-vendor option[value="amd"]'))
    rows = [
        driver.call("GET", f"/element/{e}/attribute/data-row")
        for e in driver.find_all("#matrix tbody tr")
    ]
    assert rows
    assert all(r.startswith("amd:") for r in rows)
    assert len(rows) < rows_before
    assert "vendor=amd" in driver.call("GET", "/url")

    driver.click(driver.find("#detail-close"))
    assert not driver.displayed(driver.find("#detail"))
    driver.click(driver.find("#f-reset"))
    assert len(driver.find_all("#matrix tbody tr")) == rows_before
