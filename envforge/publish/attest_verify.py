"""Checking attestations (:mod:`envforge.publish.attestation`): signature by a trusted key,
subject, statement and predicate schema; and what a set of them says (how many, from
which hosts and archs, what passed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envforge.core.jsonlimits import loads
from envforge.publish.attestation import (
    Subject,
    read_raw,
    statement_problems,
    subjects_of,
)
from envforge.publish.dsse import INTOTO_PAYLOAD_TYPE, Envelope, verified_keys
from envforge.publish.signing import TrustList


@dataclass(frozen=True)
class Checked:
    """One envelope, checked: ``problems`` empty means it is trusted and about the
    expected subject, with a valid predicate."""

    source: str
    problems: tuple[str, ...]
    signers: tuple[str, ...] = ()
    subjects: tuple[Subject, ...] = ()
    result: str = ""
    recipe: str = ""
    level: str = ""
    host_id: str = ""
    machine: str = ""
    archs: tuple[str, ...] = ()
    issued: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def passed(self) -> bool:
        return self.ok and self.result in ("PASSED", "WARNED")

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "problems": list(self.problems),
            "signers": list(self.signers),
            "subjects": [s.to_dict() for s in self.subjects],
            "result": self.result,
            "recipe": self.recipe,
            "level": self.level,
            "host": self.host_id,
            "machine": self.machine,
            "archs": list(self.archs),
            "issued": self.issued,
        }


def _facts(pred: Mapping[str, Any]) -> dict[str, Any]:
    host = pred.get("host") if isinstance(pred.get("host"), Mapping) else {}
    assert isinstance(host, Mapping)
    gpus = [g for g in host.get("gpus") or () if isinstance(g, Mapping)]
    archs = tuple(sorted({str(g.get("arch")) for g in gpus if g.get("arch")})) or ("cpu",)
    recipe = pred.get("recipe") if isinstance(pred.get("recipe"), Mapping) else {}
    assert isinstance(recipe, Mapping)
    return {
        "result": str(pred.get("result", "")),
        "recipe": str(recipe.get("name", "")),
        "level": str(pred.get("level", "")),
        "host_id": str(host.get("id") or ""),
        "machine": str(host.get("machine", "")),
        "archs": archs,
        "issued": str(pred.get("issuedAt", "")),
    }


def check_envelope(raw: Any, trust: TrustList, expected: str | None, *, source: str) -> Checked:
    """Check one envelope (its parsed JSON) against ``trust`` and the ``expected``
    subject digest (``sha256:<hex>``; None: the subject is not checked)."""
    try:
        envelope = Envelope.from_dict(raw)
    except ValueError as exc:
        return Checked(source, (f"not a DSSE envelope: {exc}",))
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        return Checked(
            source, (f"payloadType {envelope.payload_type!r} is not {INTOTO_PAYLOAD_TYPE}",)
        )
    signers = verified_keys(envelope, trust.keys.values())
    problems: list[str] = []
    if not signers:
        named = ", ".join(s.keyid[:23] or "no keyid" for s in envelope.signatures)
        problems.append(
            f"no signature verifies with the {len(trust.keys)} trusted key(s) (signed as {named})"
        )
    try:
        data = loads(envelope.payload)
    except ValueError:
        return Checked(source, (*problems, "the payload is not JSON"))
    shape = statement_problems(data)
    if shape:
        return Checked(source, (*problems, *shape[:5]))
    subjects = subjects_of(data)
    if expected is not None and expected.split(":", 1)[-1] not in (s.sha256 for s in subjects):
        problems.append(f"its subject ({subjects[0].digest[:19]}) is not {expected[:19]}")
    return Checked(
        source,
        tuple(problems),
        tuple(k.label for k in signers),
        subjects,
        **_facts(data["predicate"]),
    )


def check_file(path: Path, trust: TrustList, expected: str | None) -> list[Checked]:
    """Every envelope in ``path``, checked (source ``path:line``)."""
    return [
        check_envelope(raw, trust, expected, source=f"{path}:{number}")
        for number, raw in enumerate(read_raw(path), 1)
    ]


@dataclass(frozen=True)
class Tally:
    """What a set of checked attestations says."""

    total: int
    verified: int
    passed: int
    failed: int
    hosts: int
    archs: Mapping[str, int]
    machines: Mapping[str, int]
    signers: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "verified": self.verified,
            "passed": self.passed,
            "failed": self.failed,
            "hosts": self.hosts,
            "archs": dict(self.archs),
            "machines": dict(self.machines),
            "signers": dict(self.signers),
        }

    def line(self) -> str:
        refused = self.total - self.verified
        parts = [
            f"{self.total} attestation(s): {self.verified} verified"
            + (f", {refused} REFUSED" if refused else "")
        ]
        if self.verified:
            parts.append(f"{self.passed} passed, {self.failed} failed")
            parts.append(f"{self.hosts} host(s)")
            parts.append("archs " + ", ".join(f"{a} ×{n}" for a, n in self.archs.items()))
            parts.append("machines " + ", ".join(f"{m} ×{n}" for m, n in self.machines.items()))
            parts.append("signed by " + ", ".join(self.signers))
        return "; ".join(parts)


def tally(checks: Sequence[Checked]) -> Tally:
    good = [c for c in checks if c.ok]
    hosts = {c.host_id or f"(unnamed {n})" for n, c in enumerate(good)}
    return Tally(
        total=len(checks),
        verified=len(good),
        passed=sum(1 for c in good if c.passed),
        failed=sum(1 for c in good if not c.passed),
        hosts=len(hosts),
        archs=dict(Counter(a for c in good for a in c.archs).most_common()),
        machines=dict(Counter(c.machine or "?" for c in good).most_common()),
        signers=dict(Counter(s for c in good for s in c.signers).most_common()),
    )


def describe(check: Checked) -> str:
    """One line for one attestation."""
    if not check.ok:
        return f"REFUSED  {check.source}: {'; '.join(check.problems)}"
    verdict = "pass" if check.passed else "FAIL"
    host = check.host_id[:12] if check.host_id else "unnamed host"
    return (
        f"{verdict}  {check.source}: {check.recipe} ({check.level}) on "
        f"{'/'.join(check.archs)} {check.machine}, host {host}, {check.issued}, "
        f"signed by {', '.join(check.signers)}"
    )
