"""Signed evidence: ``--require-signed`` (and ``ENVFORGE_REQUIRE_SIGNED=1``) on ``evidence
import``, ``matrix`` and ``show``; unsigned evidence, where allowed, labelled."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.publish.certificate import Certificate, sign
from envforge.publish.signing import generate, load_signing_key
from tests.helpers.matrix_synth import Spec, make_certificate


def _spec(day: int) -> Spec:
    return Spec(
        vendor="none",
        arch=None,
        product="",
        driver="",
        recipe="cpu",
        stack="torch2.13.0-cpu-py3.11",
        outcome="pass",
        created=datetime(2026, 11, day, tzinfo=timezone.utc),
    )


@pytest.fixture
def evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """Three passing certificates of cpu: signed by the trusted key, unsigned, and signed
    by a stranger; the trusted public key; its fingerprint."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENVFORGE_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("ENVFORGE_REQUIRE_SIGNED", raising=False)
    key_path, pub = generate(tmp_path / "site", "site")
    stranger_path, _ = generate(tmp_path / "stranger", "stranger")
    folder = tmp_path / "evidence"
    folder.mkdir()
    key = load_signing_key(key_path)
    signed = sign(Certificate.from_data(make_certificate(_spec(20))), key)
    (folder / "signed.json").write_text(signed.to_json())
    (folder / "unsigned.json").write_text(json.dumps(make_certificate(_spec(21))))
    other = sign(
        Certificate.from_data(make_certificate(_spec(22))), load_signing_key(stranger_path)
    )
    (folder / "stranger.json").write_text(other.to_json())
    return folder, pub, key.public.fingerprint


def test_import_require_signed_keeps_only_trusted_signed_records(
    evidence: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, pub, fingerprint = evidence
    code = main(["evidence", "import", str(folder), "--require-signed", "--trust", str(pub)])
    assert code == 0
    out, err = capsys.readouterr()
    assert out.count("added") == 1
    assert f"signed by site ({fingerprint[:19]})" in out
    assert "1 added, 0 already in the store, 2 skipped" in err
    assert err.count("not counted (signed evidence is required)") == 2
    assert "unsigned: not counted" in err
    assert "(not a trusted key): not counted" in err


def test_the_environment_variable_makes_it_the_default_and_needs_trusted_keys(
    evidence: tuple[Path, Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, pub, _fp = evidence
    monkeypatch.setenv("ENVFORGE_REQUIRE_SIGNED", "1")
    assert main(["evidence", "import", str(folder)]) == 2
    assert "ENVFORGE_REQUIRE_SIGNED=1: signed evidence is required" in capsys.readouterr().err
    monkeypatch.setenv("ENVFORGE_TRUSTED_KEYS", str(pub))
    assert main(["evidence", "import", str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["added"] == 1
    assert len(data["skipped"]) == 2


def test_without_it_every_record_counts_and_unsigned_ones_say_so(
    evidence: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, pub, _fp = evidence
    assert main(["evidence", "import", str(folder), "--trust", str(pub), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["records"]
    assert len(records) == 3
    assert sum(r["signed"].startswith("signed by site (") for r in records) == 1
    assert sum(r["signed"] == "unsigned" for r in records) == 1
    assert sum("(not a trusted key)" in r["signed"] for r in records) == 1


def test_show_counts_only_signed_runs_when_required(
    evidence: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, pub, _fp = evidence
    assert main(["evidence", "import", str(folder)]) == 0
    capsys.readouterr()
    assert main(["show", "cpu", "--json", "--require-signed", "--trust", str(pub)]) == 0
    where = json.loads(capsys.readouterr().out)["certified_on"]
    assert where.startswith("certified on CPU only, 1 host, newest 2026-11-20")
    assert where.endswith("(signed evidence only; 2 runs not signed by a trusted key not counted)")
    assert main(["show", "cpu", "--json", "--trust", str(pub)]) == 0
    where = json.loads(capsys.readouterr().out)["certified_on"]
    assert "newest 2026-11-22" in where
    assert where.endswith("(2 of 3 passing run(s) unsigned or not trusted)")


def test_matrix_require_signed_leaves_unsigned_reports_out(
    evidence: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, pub, _fp = evidence
    args = ["matrix", "--evidence", str(folder), "-o", str(tmp_path / "site"), "--json"]
    assert main([*args, "--require-signed", "--trust", str(pub)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == 1
    assert summary["signed"].startswith("signed evidence only: 1 counted, 2 not signed")
    assert main([*args, "--trust", str(pub)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == 3
    assert summary["signed"] == "2 of 3 report(s) unsigned or not trusted (counted, labelled)"
    # the store's matrix too
    assert main(["evidence", "import", str(folder)]) == 0
    capsys.readouterr()
    store_args = ["matrix", "-o", str(tmp_path / "site2"), "--json", "--trust", str(pub)]
    assert main([*store_args, "--require-signed"]) == 0
    assert json.loads(capsys.readouterr().out)["reports"] == 1
    assert main(store_args) == 0
    assert json.loads(capsys.readouterr().out)["reports"] == 3


def test_fleet_collect_imports_only_signed_reports_when_required(
    evidence: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet task's probe.json is unsigned: labelled so, and not imported (nor put in
    the site) when signed evidence is required."""
    from envforge.fleet.planning import load_plan
    from tests.unit.fleet.test_hostile_fleet import _write, report

    _folder, pub, _fp = evidence
    plan_dir = tmp_path / "plan"
    argv = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--level", "quick"]
    assert main([*argv, "--nodes", "1", "-o", str(plan_dir)]) == 0
    _write(plan_dir, 0, report(load_plan(plan_dir), 0))
    capsys.readouterr()
    collect = ["fleet", "collect", str(plan_dir), "--json", "--trust", str(pub)]
    main([*collect, "--require-signed", "-o", str(tmp_path / "site")])
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 0
    assert summary["not_counted"] == 1
    assert summary["tasks"][0]["signed"] == "unsigned"
    matrix = json.loads((tmp_path / "site" / "matrix.json").read_text())
    assert matrix["reports"] == 0
    main(collect)
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 1
    assert summary["tasks"][0]["signed"] == "unsigned"


def test_an_exported_record_naming_a_trusted_signer_is_not_signed_evidence(
    evidence: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export line's ``signer`` is a claim with no signature behind it: it never
    counts as signed, so a bundle cannot forge a trusted signer."""
    folder, pub, fingerprint = evidence
    assert main(["evidence", "import", str(folder / "signed.json")]) == 0
    bundle = tmp_path / "bundle.jsonl"
    assert main(["evidence", "export", "-o", str(bundle)]) == 0
    line = json.loads(bundle.read_text().splitlines()[0])
    assert line["signer"] == fingerprint  # what the store's record says
    line["key"] = "sha256:" + "9" * 64
    line["created"] = "2026-11-25T00:00:00Z"
    forged = tmp_path / "forged.jsonl"
    forged.write_text(json.dumps(line) + "\n")
    capsys.readouterr()
    args = ["evidence", "import", str(forged), "--trust", str(pub)]
    assert main([*args, "--require-signed"]) == 2  # nothing could be read
    assert "unsigned: not counted" in capsys.readouterr().err
    assert main(args) == 0
    assert "unsigned" in capsys.readouterr().out
