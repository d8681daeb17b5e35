"""Issue 22 class 8: one JSON decoder with limits, shape checks on registry documents,
bounded reads of evidence, keys and trust files.

The corpus is ``tests/fixtures/hostile/`` (``registry/`` served by a real HTTP server on
127.0.0.1, ``evidence/`` read from disk); FIFOs are made here, ``/dev/zero`` is only read.
The same corpus runs through real processes in tests/acceptance/test_hostile_inputs.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.core import jsonlimits
from envforge.core.jsonlimits import BadJSON
from envforge.errors import EnvforgeError, ExitCode, InvalidInput
from envforge.publish import registry
from tests.helpers import hostile_registry, paths

HOSTILE = paths.TESTS / "fixtures" / "hostile"
REGISTRY_CASES = sorted(p.name for p in (HOSTILE / "registry").iterdir())
EVIDENCE_CASES = sorted(p.name for p in (HOSTILE / "evidence").iterdir())


# --------------------------------------------------------------------------- the decoder


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
        ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
        ('{"a":' * 100 + "1" + "}" * 100, "nested deeper than 64 levels"),
        ("9" * 5000, "a number of 5000 digits"),
        ('{"v": -' + "1" * 65 + "}", "a number of 66 digits"),
        ("NaN", "NaN is not a JSON value"),
        ("[-Infinity]", "-Infinity is not a JSON value"),
        ("1e999999", "out of range"),
        ("{", "not JSON: Expecting property name"),
        ("", "not JSON"),
    ],
)
def test_the_decoder_refuses_hostile_shapes_in_one_line(text: str, reason: str) -> None:
    with pytest.raises(BadJSON) as info:
        jsonlimits.loads(text)
    assert reason in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)  # callers catching ValueError still catch it


def test_the_decoder_keeps_what_is_within_limits() -> None:
    doc = {"a": [1, 2.5, -3, "x", None, True, {"b": [[[]]]}], "n": -(10**63)}
    assert jsonlimits.loads(json.dumps(doc)) == doc
    assert jsonlimits.loads(("[" * 64) + ("]" * 64)) is not None
    with pytest.raises(BadJSON, match="larger than 10 bytes"):
        jsonlimits.loads(b"[1, 2, 3, 4, 5]", max_bytes=10)
    with pytest.raises(BadJSON, match="not UTF-8"):
        jsonlimits.loads(b'"\xff"')


def test_load_file_refuses_a_fifo_and_dev_zero_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    from envforge.core.fsutil import FileTooLarge, NotRegularFile, read_reason

    with pytest.raises(NotRegularFile) as info:
        jsonlimits.load_file(fifo)
    assert read_reason(info.value, fifo) == "it is a FIFO, not a regular file"
    with pytest.raises(NotRegularFile):
        jsonlimits.load_file(Path("/dev/zero"))
    big = tmp_path / "big.json"
    big.write_text("[" + "1," * 100 + "1]")
    with pytest.raises(FileTooLarge) as too:
        jsonlimits.load_file(big, max_bytes=50)
    assert read_reason(too.value) == "larger than 50 bytes"


# --------------------------------------------------------------------------- registry


@pytest.fixture(scope="module")
def hostile() -> Iterator[hostile_registry.HostileRegistry]:
    with hostile_registry.serving() as state:
        yield state


@pytest.mark.parametrize("name", [n for n in REGISTRY_CASES if not n.startswith("label-")])
def test_a_hostile_registry_document_is_one_line_exit_4(
    hostile: hostile_registry.HostileRegistry, name: str
) -> None:
    with pytest.raises(EnvforgeError) as info:
        registry.image_labels(hostile.ref(name))
    assert info.value.exit_code is ExitCode.UNAVAILABLE, info.value.one_line()
    line = info.value.one_line()
    assert "\n" not in line
    assert "\x1b" not in line
    assert len(line) < 400


@pytest.mark.parametrize("name", REGISTRY_CASES)
def test_evidence_import_skips_every_hostile_registry_image(
    hostile: hostile_registry.HostileRegistry,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Skipped in one line; nothing read: exit 4 when the registry's answer could not be
    used (errors.py: network problems), 2 when a well-formed image's label is bad."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    ref = hostile.ref(name)
    assert main(["evidence", "import", ref]) == (2 if name.startswith("label-") else 4)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    skipped = [ln for ln in err.splitlines() if ln.startswith("envforge: skipped")]
    assert len(skipped) == 1, err
    assert ref in skipped[0]
    assert not (tmp_path / "home" / "evidence").exists() or not any(
        (tmp_path / "home" / "evidence").rglob("*.json")
    )


def test_a_digest_reference_must_be_a_digest() -> None:
    with pytest.raises(InvalidInput, match="is not a sha256 digest"):
        registry.parse_ref("127.0.0.1:5000/team/cpu@sha256:../../x")
    ok = registry.parse_ref("127.0.0.1:5000/team/cpu@sha256:" + "a" * 64)
    assert ok.reference == "sha256:" + "a" * 64


# --------------------------------------------------------------------------- evidence


@pytest.mark.parametrize("name", EVIDENCE_CASES)
def test_evidence_import_skips_every_hostile_file_in_one_line(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    path = HOSTILE / "evidence" / name
    assert main(["evidence", "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    skipped = [ln for ln in err.splitlines() if ln.startswith("envforge: skipped")]
    assert skipped, err
    assert all(str(path) in ln for ln in skipped)


def test_matrix_reads_the_whole_evidence_corpus_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    code = main(["matrix", "--evidence", str(HOSTILE / "evidence"), "-o", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0, err
    assert err.count("envforge: skipped") >= len(EVIDENCE_CASES)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "fifo-in-folder"])
def test_special_files_as_evidence_keys_and_trust_are_exit_2_at_once(
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    if kind == "dev-zero":
        path = Path("/dev/zero")  # read-only use: opened, found to be a device, closed
    else:
        folder = tmp_path / "ev"
        folder.mkdir()
        path = folder / "report.json"
        os.mkfifo(path)
    source = path.parent if kind == "fifo-in-folder" else path
    assert main(["evidence", "import", str(source)]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err, err
    if kind == "fifo-in-folder":
        return
    for args in (
        ["certify", "cpu", "--signing-key", str(path)],
        ["matrix", "--evidence", str(tmp_path), "--trust", str(path), "-o", str(tmp_path / "s")],
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "not a regular file" in err, err
        assert "Traceback" not in err


# --------------------------------------------------------------------------- one decoder

#: Where ``json.loads`` may still be called, and why it is not an input.
JSON_ALLOWED = {
    "envforge/core/jsonlimits.py": "the decoder itself",
    "envforge/probe/worker/driver.py": "runs inside the image with the stdlib only; reads the "
    "spec envforge wrote for it",
    "envforge/probe/worker/collective.py": "runs inside the image with the stdlib only; reads "
    "the last line its own rank 0 printed (at most 64 KiB are read)",
    "envforge/publish/certificate.py": "round-trips the certificate it is issuing (canonical JSON)",
}


def test_every_json_input_goes_through_the_one_decoder() -> None:
    import ast

    root = paths.ROOT
    found: list[str] = []
    for path in sorted((root / "envforge").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in JSON_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("loads", "load")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "json"
            ):
                found.append(f"{rel}:{node.lineno}")
    assert found == [], "use envforge.core.jsonlimits.loads / load_file: " + ", ".join(found)
