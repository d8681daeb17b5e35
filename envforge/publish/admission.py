"""Admission by attestation: may this host run an environment (an image digest, a venv)?

Yes when at least one attestation signed by a trusted key, about that digest, records a
pass on one of this host's archs (``cpu``: a host without a GPU). ``pull --trust`` asks
it of the attestations attached to the pulled digest in its registry (and keeps the ones
it verified in :func:`received_dir`), ``shell`` of those this host made or received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envforge.core.fsutil import write_atomically
from envforge.errors import CertificationFailed
from envforge.publish.attest_verify import Checked, check_envelope, describe
from envforge.publish.attestation import SUFFIX, read_raw
from envforge.publish.signing import TrustList

#: What an admission refusal says to do.
FIX = "certify it on a host with this arch and attach it (envforge certify REF --attach)"


def host_archs(gpu_archs: Iterable[str | None]) -> tuple[str, ...]:
    """The archs an attestation must name for this host: its GPUs' (``cpu`` without)."""
    archs = tuple(sorted({a for a in gpu_archs if a}))
    return archs or ("cpu",)


@dataclass(frozen=True)
class Admission:
    """The answer for one digest: the attestation that admitted it (None: refused)."""

    what: str
    archs: tuple[str, ...]
    checks: tuple[Checked, ...]
    admitted_by: Checked | None

    def line(self) -> str:
        """One line saying which attestation admitted it."""
        by = self.admitted_by
        assert by is not None
        return (
            f"admitted {self.what}: trusted pass on {'/'.join(self.archs)} by "
            + describe(by).split("  ", 1)[-1]
        )

    def refusal(self) -> CertificationFailed:
        """One line naming why it is refused, and the fix."""
        arch = "/".join(self.archs)
        passed = sorted({a for c in self.checks if c.passed for a in c.archs})
        verified = sum(1 for c in self.checks if c.ok)
        if not self.checks:
            why = "no attestation of it"
        elif not verified:
            why = f"none of {len(self.checks)} attestation(s) is signed by a trusted key"
        else:
            why = f"no trusted pass on {arch} among {len(self.checks)} attestation(s)" + (
                f" (passes on: {', '.join(passed)})" if passed else ""
            )
        return CertificationFailed(
            f"refused {self.what}: {why}", hint=FIX.replace("this arch", arch)
        )


def admit(what: str, checks: Sequence[Checked], archs: Sequence[str]) -> Admission:
    """The first verified pass on one of ``archs`` (the newest issued first)."""
    passing = [c for c in checks if c.passed and set(c.archs) & set(archs)]
    passing.sort(key=lambda c: c.issued, reverse=True)
    return Admission(what, tuple(archs), tuple(checks), passing[0] if passing else None)


def require(what: str, checks: Sequence[Checked], archs: Sequence[str]) -> Admission:
    """:func:`admit`, raising its refusal (exit 1) when nothing admits it."""
    answer = admit(what, checks, archs)
    if answer.admitted_by is None:
        raise answer.refusal()
    return answer


def check_raw(raw: Sequence[Any], trust: TrustList, expected: str, *, source: str) -> list[Checked]:
    return [
        check_envelope(value, trust, expected, source=f"{source} #{n}")
        for n, value in enumerate(raw, 1)
    ]


def check_files(files: Iterable[Path], trust: TrustList, expected: str) -> list[Checked]:
    """Every envelope in the ``files`` that exist, checked against ``expected``."""
    checks: list[Checked] = []
    for path in files:
        for n, value in enumerate(read_raw(path, missing_ok=True), 1):
            checks.append(check_envelope(value, trust, expected, source=f"{path}:{n}"))
    return checks


def received_dir(state: Path) -> Path:
    """Where attestations received with ``pull --trust`` are kept (apart from this
    host's own, which ``publish`` attaches)."""
    return state / "attestations" / "received"


def keep_received(state: Path, digest: str, raw: Sequence[Any], checks: Sequence[Checked]) -> Path:
    """The verified ones of ``raw`` written (replacing earlier ones) for ``digest``."""
    target = received_dir(state) / (digest.split(":", 1)[-1] + SUFFIX)
    lines = [
        json.dumps(value, separators=(",", ":"), sort_keys=True) + "\n"
        for value, check in zip(raw, checks, strict=True)
        if check.ok
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, "".join(lines))
    return target


def own_files(state: Path, digest: str) -> tuple[Path, Path]:
    """The attestations of ``digest`` this host made and those it received."""
    name = digest.split(":", 1)[-1] + SUFFIX
    return state / "attestations" / name, received_dir(state) / name


@dataclass(frozen=True)
class Gate:
    """``shell``'s admission check (:data:`envforge.backends.base.Admit`): the backend's
    files and this host's store for the digest, against ``trust`` and ``archs``; says
    which attestation admitted it, raises the one-line refusal otherwise."""

    trust: TrustList
    archs: tuple[str, ...]
    state: Path
    say: Callable[[str], None]

    def __call__(self, digest: str, what: str, files: Sequence[Path]) -> None:
        checks = check_files((*files, *own_files(self.state, digest)), self.trust, digest)
        self.say(require(f"{what} ({digest[:19]})", checks, self.archs).line())
