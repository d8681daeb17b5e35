"""The worker's package steps: import:NAME from the installed metadata, companion device steps.

Distributions here are real folders on a real ``sys.path`` entry (a temporary site folder
with ``*.dist-info`` metadata). The companion steps against real torch are acceptance
tests (tests/acceptance/test_probe_worker_torch.py): the unit tier needs no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.probe.worker.test_probe_worker import _load_worker

W = _load_worker()


def _dist(
    site: Path, name: str, version: str, files: dict[str, str], top_level: str | None = None
) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    record = [f"{path},sha256=x,1" for path in files] + [f"{info.name}/METADATA,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    for path, text in files.items():
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _ctx(**spec: Any) -> Any:
    return W.Context({"vendor": "none", **spec})


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("pkg_a/__init__.py", "pkg_a"),
        ("single.py", "single"),
        ("_speedup.cpython-311-x86_64-linux-gnu.so", "_speedup"),
        ("pkg_a-1.0.dist-info/METADATA", None),
        ("pkg_a-1.0.data/scripts/run", None),
        ("../../bin/tool", None),
        ("extras.pth", None),
        ("__pycache__/x.pyc", None),
    ],
)
def test_record_paths_name_their_top_level_module(path: str, module: str | None) -> None:
    assert W.module_of(path) == module


def test_names_are_compared_in_their_canonical_form() -> None:
    assert W.canonical("Typing_Extensions") == "typing-extensions"
    assert W.canonical("zope.interface") == "zope-interface"
    assert W.canonical("a--b__c") == "a-b-c"


def test_the_import_step_imports_every_top_level_module_from_record(site: Path) -> None:
    _dist(
        site,
        "Two_Mods",
        "1.2",
        {
            "alpha/__init__.py": "X = 1\n",
            "beta.py": "Y = 2\n",
            "__editable___finder.py": "raise SystemExit(9)\n",
        },
    )
    detail, data = W.make_import_step("two-mods")(_ctx())
    assert detail == "two-mods 1.2: imported alpha, beta"
    assert data["modules"] == ["alpha", "beta"]
    assert "alpha" in sys.modules
    assert "beta" in sys.modules


def test_top_level_txt_wins_over_record(site: Path) -> None:
    _dist(
        site,
        "lib",
        "3.0",
        {"lib/__init__.py": "", "lib_tests/__init__.py": "raise 1/0\n"},
        top_level="lib\n",
    )
    assert W.make_import_step("lib")(_ctx())[1]["modules"] == ["lib"]


def test_a_module_that_fails_to_import_fails_the_step_with_the_errors_first_line(
    site: Path,
) -> None:
    _dist(
        site,
        "visionish",
        "0.28.0",
        {
            "visionish/__init__.py": (
                "raise RuntimeError('operator visionish::nms does not exist\\nmore text')\n"
            ),
        },
    )
    ctx = _ctx()
    with pytest.raises(W.StepFailed) as failed:
        W.make_import_step("visionish")(ctx)
    assert str(failed.value) == (
        "visionish 0.28.0: import visionish: RuntimeError: operator visionish::nms does not exist"
    )
    # its device steps skip and say why
    with pytest.raises(W.Skip, match="visionish is not importable: RuntimeError: operator"):
        ctx.need_module("visionish")


def test_a_distribution_that_is_not_installed_fails_the_step(site: Path) -> None:
    with pytest.raises(W.StepFailed, match="nothere is not installed"):
        W.make_import_step("nothere")(_ctx())


def test_the_worker_runs_import_steps_by_name() -> None:
    assert W.IMPORT_PREFIX == "import:"
    assert {"torchvision-nms", "torchvision-convnet", "torchaudio-melspectrogram"} <= set(W.STEPS)


# --------------------------------------------------------------------------- companions
# (their device steps against real torch: tests/acceptance/test_probe_worker_torch.py)


def test_companion_steps_skip_when_the_companion_did_not_import() -> None:
    ctx = _ctx()
    ctx.torch, ctx.device = object(), "cpu"  # the step skips before it touches torch
    ctx.module_errors["torchvision"] = "RuntimeError: operator torchvision::nms does not exist"
    with pytest.raises(W.Skip, match="torchvision is not importable: RuntimeError"):
        W.step_torchvision_convnet(ctx)
