"""Evidence: probe reports and certificates read from files and folders, as frozen records.

What is read (each recognised by its content, not its file name):

* a probe report, ``probe.json`` (:meth:`envforge.probe.report.ProbeReport.to_json`,
  schema ``envforge.probe/1``), as ``envforge probe --report DIR`` and ``build``/``certify
  --report DIR`` write it;
* a certificate (:class:`envforge.publish.certificate.Certificate`, schema
  ``envforge.certificate/2`` or ``/1``):
  the files of the local store (``$ENVFORGE_HOME/certificates/<hex>.json``) and the
  ``certificate.json`` that ``--report DIR`` writes beside ``probe.json``. Its digest is
  checked: an altered certificate is reported, not read;
* a virtualenv certification marker (``VENV/.envforge/certified.json``: the report that
  passed, with the recipe and its hash);
* an exported record (schema ``envforge.evidence/1``, :meth:`Evidence.to_export`): what
  ``envforge evidence export`` writes, already normalised and redacted;
* a bundle: ``*.jsonl``, one of the above per line.

A folder is searched recursively for ``*.json`` and ``*.jsonl`` files (symbolic links to
folders are not followed). A file that is not one of these, or that cannot be read, is a
:class:`Problem` (one line naming the file, and the line for bundles) and is skipped.

Each report becomes one :class:`Evidence`: the recipe and stack, the outcome, the time,
the host facts (GPU vendor, arch, product and PCI id, GPU count, driver, kernel, the
torch build and the ROCm/CUDA runtime it saw, the envforge version, the anonymous host
id of :func:`envforge.probe.report.host_id`), the steps, and for a signed certificate
the signer's key fingerprint (with ``signatures=True`` only after the signature was
checked against the key it names: a certificate whose signature does not match is a
:class:`Problem`). The same probe run read twice (the certificate in the store *and* its
``probe.json`` in a report folder) is one record: records are keyed by the sha256 of the
report's canonical JSON, and the certificate is preferred (it adds the digest and stack tag).

Nothing that names a host or a user is kept: the probe target (an interpreter path or an
image ID) and the environment snapshot are dropped except for the Python, torch, HIP and
CUDA versions, and step details are passed through :class:`Redactor` (home folders, this
host's name and this user's name are replaced).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from envforge.core.fsutil import read_limited, read_reason
from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import EnvforgeError, InvalidInput
from envforge.evidence.redact import Redactor as Redactor  # noqa: PLC0414 - re-exported
from envforge.host.detect import nvidia_arch_for_product
from envforge.knowledge.table import CompatTable
from envforge.probe.report import SCHEMA as PROBE_SCHEMA
from envforge.probe.report import ProbeReport, StepResult
from envforge.publish.certificate import FORMATS as CERT_FORMATS
from envforge.publish.certificate import Certificate
from envforge.publish.signing import check_signature

Outcome = Literal["pass", "fail", "hang", "crash", "oom", "no-device"]
#: A run's outcome: ``pass``, else the status of its first step that neither passed nor
#: was skipped (a report with no steps is a ``fail``).
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "hang", "crash", "oom", "no-device")
Kind = Literal["certificate", "venv", "probe"]
#: Which copy of a run is kept when it is read more than once (lower wins).
_KIND_RANK: dict[Kind, int] = {"certificate": 0, "venv": 1, "probe": 2}
#: Characters of a step detail that are kept.
DETAIL_LIMIT = 4000
VENDORS = ("amd", "nvidia", "none")
EXPORT_SCHEMA = "envforge.evidence/1"


class EvidenceError(InvalidInput):
    """A file that is not readable evidence (the message names what is wrong)."""


@dataclass(frozen=True)
class Problem:
    """A file (or a bundle's line) that was skipped, and why."""

    source: str
    message: str

    def line(self) -> str:
        return " ".join(f"{self.source}: {self.message}".split())


@dataclass(frozen=True)
class Gpu:
    """The GPU a report ran on: ``vendor`` amd/nvidia/none, ``arch`` (``cpu`` for none,
    ``unknown`` when the report does not say), the product name (empty for none)."""

    vendor: str
    arch: str
    product: str

    @property
    def row_key(self) -> str:
        return f"{self.vendor}:{self.arch}"


@dataclass(frozen=True)
class Evidence:
    """One probe run, normalised; see the module docstring for what is (not) kept."""

    key: str
    kind: Kind
    recipe: str
    recipe_hash: str
    stack: str
    outcome: Outcome
    created: datetime
    level: str
    gpu: Gpu
    gpu_count: int
    driver: str
    kernel: str
    torch: str
    runtime: str
    python: str
    envforge_version: str
    seconds: float
    steps: tuple[StepResult, ...]
    certificate: str = ""
    pci_id: str = ""
    #: Anonymous host id (``h-…``), "" when the report has none.
    host: str = ""
    #: Fingerprint of the key that signed the certificate ("" when unsigned).
    signer: str = ""

    def to_export(self) -> dict[str, Any]:
        """The ``envforge.evidence/1`` form (one line of ``evidence export``)."""
        return {
            "schema": EXPORT_SCHEMA,
            "key": self.key,
            "kind": self.kind,
            "recipe": self.recipe,
            "recipe_hash": self.recipe_hash,
            "stack": self.stack,
            "outcome": self.outcome,
            "created": self.created.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
            "level": self.level,
            "gpu": {
                "vendor": self.gpu.vendor,
                "arch": self.gpu.arch,
                "product": self.gpu.product,
                "pci_id": self.pci_id,
            },
            "gpu_count": self.gpu_count,
            "driver": self.driver,
            "kernel": self.kernel,
            "torch": self.torch,
            "runtime": self.runtime,
            "python": self.python,
            "envforge_version": self.envforge_version,
            "seconds": self.seconds,
            "host": self.host,
            "certificate": self.certificate,
            "signer": self.signer,
            "steps": [s.to_dict() for s in self.steps],
        }

    @property
    def column(self) -> str:
        """The matrix column: the recipe, else the stack, else ``(unnamed)``."""
        return self.recipe or self.stack or "(unnamed)"

    @property
    def date(self) -> str:
        return self.created.strftime("%Y-%m-%d")

    @property
    def first_problem(self) -> StepResult | None:
        return next((s for s in self.steps if s.status not in ("pass", "warn", "skip")), None)


@dataclass(frozen=True)
class EvidenceSet:
    """Everything read: the records (deduplicated), the skipped files, the counts."""

    records: tuple[Evidence, ...]
    problems: tuple[Problem, ...] = ()
    duplicates: int = 0
    files: int = 0


# --------------------------------------------------------------------------- parsing


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def parse_time(text: str) -> datetime:
    """ISO 8601 (``2026-11-20T12:00:00Z``, with or without an offset) → aware UTC."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    when = datetime.fromisoformat(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _runtime(snapshot: Mapping[str, Any]) -> tuple[str, str]:
    """(``ROCm 5.2`` / ``CUDA 12.8`` / ``cpu`` / ``""``, the stack's variant part)."""
    hip, cuda = _str(snapshot.get("hip")), _str(snapshot.get("cuda"))
    if hip:
        return f"HIP {hip}", "rocm" + _major_minor(hip)
    if cuda:
        return f"CUDA {cuda}", "cu" + _major_minor(cuda).replace(".", "")
    if snapshot.get("torch"):
        return "cpu", "cpu"
    return "", ""


def _stack(torch: str, variant: str, python: str) -> str:
    """``torch<version>-<rocmX.Y|cuNNN|cpu>-py<X.Y>`` as the Docker backend tags it."""
    if not torch:
        return ""
    parts = ["torch" + torch.split("+", 1)[0]]
    if variant:
        parts.append(variant)
    if python:
        parts.append("py" + _major_minor(python))
    return "-".join(parts)


def _gpu(report: ProbeReport, recipe: str, table: CompatTable | None = None) -> Gpu:
    """The GPU the run used: one whose arch names the recipe, else the first with an
    arch, else the first; ``Gpu("none", "cpu", "")`` when the host has none."""
    gpus = report.host.gpus
    if not gpus:
        return Gpu("none", "cpu", "")
    chosen = (
        next((g for g in gpus if g.arch and _str(g.arch) == recipe), None)
        or next((g for g in gpus if g.arch), None)
        or gpus[0]
    )
    vendor = _str(chosen.vendor).lower() or "unknown"
    product = " ".join(_str(chosen.name).split())
    arch = _str(chosen.arch)
    if not arch and vendor == "nvidia":
        arch = nvidia_arch_for_product(product, table) or ""
    return Gpu(vendor, arch or "unknown", product)


def _pci_of(report: ProbeReport, gpu: Gpu) -> str:
    for g in report.host.gpus:
        if " ".join(_str(g.name).split()) == gpu.product and g.pci_id:
            return _str(g.pci_id)
    return ""


def _outcome(report: ProbeReport) -> Outcome:
    if report.passed:
        return "pass"
    problem = report.first_problem
    if problem is None or problem.status not in OUTCOMES:
        return "fail"
    status: Outcome = problem.status  # an Outcome: checked just above
    return status


def _run_key(report: ProbeReport) -> str:
    """What identifies a probe run: everything in its report but the environment snapshot
    (equal for equal runs; the JSON form's key order differs between a ``probe.json`` and
    a certificate, so the parsed values are hashed, not the text)."""
    host = report.host
    identity = (
        report.created,
        report.level,
        report.target,
        report.seconds,
        report.recipe_name,
        report.recipe_hash,
        report.envforge_version,
        host.kernel,
        host.machine,
        host.driver,
        tuple((g.name, g.arch, g.vendor) for g in host.gpus),
        tuple((s.name, s.status, s.seconds, s.detail) for s in report.steps),
    )
    return hashlib.sha256(repr(identity).encode("utf-8", "surrogatepass")).hexdigest()


def _redacted_step(step: StepResult, redact: Callable[[str], str]) -> StepResult:
    name, detail = redact(step.name), redact(step.detail[:DETAIL_LIMIT])
    if name is step.name and detail is step.detail:
        return step
    return StepResult(name=name, status=step.status, seconds=step.seconds, detail=detail)


def _from_report(
    raw: Mapping[str, Any],
    *,
    kind: Kind,
    redact: Callable[[str], str],
    recipe: str = "",
    recipe_hash: str = "",
    stack: str = "",
    certificate: str = "",
    signer: str = "",
    table: CompatTable | None = None,
) -> Evidence:
    if not isinstance(raw, Mapping):
        raise EvidenceError("its report is not a JSON object")
    schema = raw.get("schema", PROBE_SCHEMA)
    if schema != PROBE_SCHEMA:
        raise EvidenceError(f"unknown report schema {schema!r} (expected {PROBE_SCHEMA})")
    for key, kind_of in (("host", dict), ("recipe", dict), ("environment", dict)):
        if raw.get(key) is not None and not isinstance(raw[key], kind_of):
            raise EvidenceError(f"key {key!r} is not a JSON object")
    report = ProbeReport.from_dict(raw)
    key = _run_key(report)
    try:
        created = parse_time(report.created)
    except ValueError:
        raise EvidenceError(f"key 'created' is not an ISO 8601 time: {report.created!r}") from None
    snapshot = report.snapshot
    torch, python = _str(snapshot.get("torch")), _str(snapshot.get("python"))
    runtime, variant = _runtime(snapshot)
    recipe = recipe or _str(report.recipe_name)
    steps = tuple(_redacted_step(s, redact) for s in report.steps)
    gpu = _gpu(report, recipe, table)
    return Evidence(
        key=key,
        kind=kind,
        recipe=recipe,
        recipe_hash=recipe_hash or _str(report.recipe_hash),
        stack=stack or _stack(torch, variant, python),
        outcome=_outcome(report),
        created=created,
        level=report.level,
        gpu=gpu,
        gpu_count=len(report.host.gpus),
        driver=redact(_str(report.host.driver)),
        kernel=redact(report.host.kernel),
        torch=torch,
        runtime=runtime,
        python=python,
        envforge_version=report.envforge_version,
        seconds=round(report.seconds, 3),
        steps=steps,
        certificate=certificate,
        pci_id=_pci_of(report, gpu),
        host=_str(report.host.id),
        signer=signer,
    )


def _from_export(data: Mapping[str, Any], redact: Callable[[str], str]) -> Evidence:
    outcome = data["outcome"]
    if outcome not in OUTCOMES:
        raise EvidenceError(f"key 'outcome' is not one of {', '.join(OUTCOMES)}: {outcome!r}")
    kind = data.get("kind", "probe")
    if kind not in _KIND_RANK:
        raise EvidenceError(f"key 'kind' is not one of {', '.join(_KIND_RANK)}: {kind!r}")
    gpu = data.get("gpu") or {}
    if not isinstance(gpu, dict):
        raise EvidenceError("key 'gpu' is not a JSON object")
    try:
        created = parse_time(_str(data["created"]))
    except ValueError:
        raise EvidenceError(f"key 'created' is not an ISO 8601 time: {data['created']!r}") from None
    steps = tuple(_redacted_step(StepResult.from_dict(s), redact) for s in data.get("steps") or ())
    key = (
        _str(data.get("key"))
        or hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    )
    return Evidence(
        key=key,
        kind=kind,
        recipe=_str(data.get("recipe")),
        recipe_hash=_str(data.get("recipe_hash")),
        stack=_str(data.get("stack")),
        outcome=outcome,
        created=created,
        level=_str(data.get("level")),
        gpu=Gpu(
            _str(gpu.get("vendor")) or "unknown",
            _str(gpu.get("arch")) or "unknown",
            _str(gpu.get("product")),
        ),
        gpu_count=int(data.get("gpu_count") or 0),
        driver=redact(_str(data.get("driver"))),
        kernel=redact(_str(data.get("kernel"))),
        torch=_str(data.get("torch")),
        runtime=_str(data.get("runtime")),
        python=_str(data.get("python")),
        envforge_version=_str(data.get("envforge_version")),
        seconds=float(data.get("seconds") or 0.0),
        steps=steps,
        certificate=_str(data.get("certificate")),
        pci_id=_str(gpu.get("pci_id")),
        host=_str(data.get("host")),
        signer=_str(data.get("signer")),
    )


def parse_document(
    data: Any,
    redact: Callable[[str], str],
    *,
    signatures: bool = False,
    table: CompatTable | None = None,
) -> Evidence:
    """One JSON document (already decoded) → :class:`Evidence`; :class:`EvidenceError`
    (never anything else) when it is not one of the recognised forms. ``signatures``: check
    a signed certificate's signature (loads ``cryptography``); ``table``: the compat table."""
    try:
        return _parse(data, redact, signatures, table)
    except EvidenceError:
        raise
    except EnvforgeError as exc:
        raise EvidenceError(exc.message) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise EvidenceError(f"malformed report ({type(exc).__name__}: {exc})") from None


def _parse(
    data: Any,
    redact: Callable[[str], str],
    signatures: bool = False,
    table: CompatTable | None = None,
) -> Evidence:
    if not isinstance(data, dict):
        raise EvidenceError("not an envforge report: expected a JSON object")
    schema = data.get("schema")
    if isinstance(schema, str) and schema in CERT_FORMATS:
        cert = Certificate.from_data(data, source="certificate")
        signer = cert.signed_by or ""
        if signer and signatures:
            check = check_signature(cert.data)
            if check.state != "valid":
                raise EvidenceError(f"certificate signature: {check.reason}")
        return _from_report(
            cert.report,
            kind="certificate",
            redact=redact,
            recipe=cert.recipe_name,
            recipe_hash=cert.recipe_hash,
            stack=cert.stack_tag,
            certificate=cert.digest,
            signer=signer,
            table=table,
        )
    if schema == EXPORT_SCHEMA:
        return _from_export(data, redact)
    if schema == PROBE_SCHEMA:
        return _from_report(data, kind="probe", redact=redact, table=table)
    if schema is None and isinstance(data.get("report"), dict) and "fingerprint" in data:
        return _from_report(
            data["report"],
            kind="venv",
            redact=redact,
            recipe=_str(data.get("recipe")),
            recipe_hash=_str(data.get("recipe_hash")),
            table=table,
        )
    if schema is None:
        raise EvidenceError(
            "not an envforge report (no 'schema'; expected a probe.json, a certificate "
            "or a venv's certified.json)"
        )
    raise EvidenceError(f"not an envforge report (schema {schema!r})")


# --------------------------------------------------------------------------- files


def _files(path: Path, problems: list[Problem]) -> Iterator[Path]:
    """The report files under ``path``; folders that cannot be listed become problems."""

    def unreadable(exc: OSError) -> None:
        problems.append(
            Problem(str(exc.filename or path), f"cannot read folder: {exc.strerror or exc}")
        )

    if path.is_dir():
        for folder, dirs, names in os.walk(path, onerror=unreadable):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".json", ".jsonl")) and not name.startswith(".envforge-"):
                    yield Path(folder) / name
    else:
        yield path


#: Bytes one evidence file may have (a bundle of many reports); each document within
#: the decoder's own limit (:data:`envforge.core.jsonlimits.MAX_BYTES`).
MAX_FILE_BYTES = 256 * 1024 * 1024


def _documents(path: Path, needle: str | None = None) -> Iterator[tuple[str, Any]]:
    """(source, decoded JSON) for each document in ``path``; raises EvidenceError for
    a file that cannot be read or decoded at all (a FIFO, a device, too large: never
    read), and yields EvidenceError values for bad lines of a bundle. ``needle``:
    documents whose text lacks it are not decoded. Decoded by :mod:`envforge.core.jsonlimits`
    (size, depth and number limits)."""
    try:
        text = read_limited(path, MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise EvidenceError("not UTF-8 text") from None
    except OSError as exc:
        raise EvidenceError(f"cannot read: {read_reason(exc, path)}") from None
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or (needle is not None and needle not in line):
                continue
            source = f"{path}:{number}"
            try:
                yield source, loads(line)
            except BadJSON as exc:
                yield (
                    source,
                    EvidenceError(
                        str(exc) if str(exc).startswith("not JSON") else f"not JSON: {exc}"
                    ),
                )
        return
    if needle is not None and needle not in text:
        return
    try:
        yield str(path), loads(text)
    except BadJSON as exc:
        raise EvidenceError(
            str(exc) if str(exc).startswith("not JSON") else f"not JSON: {exc}"
        ) from None


def missing_paths(paths: Sequence[Path]) -> list[Path]:
    return [p for p in paths if not p.exists()]


def documents(paths: Iterable[Path], problems: list[Problem]) -> Iterator[tuple[str, Any]]:
    """(source, decoded JSON) for every document under ``paths`` (folders recursively,
    files, bundle lines); what cannot be read is added to ``problems``."""
    for root in paths:
        for path in _files(root, problems):
            try:
                for source, data in _documents(path):
                    if isinstance(data, EvidenceError):
                        problems.append(Problem(source, data.message))
                    else:
                        yield source, data
            except EvidenceError as exc:
                problems.append(Problem(str(path), exc.message))


def read_evidence(
    paths: Iterable[Path],
    redact: Redactor | None = None,
    *,
    signatures: bool = False,
    needle: str | None = None,
) -> EvidenceSet:
    """Read every report under ``paths`` (folders recursively, files, bundles).

    ``signatures``: check signed certificates' signatures (see the module docstring).
    ``needle``: a quick pre-filter, documents whose text does not contain it are skipped
    unread (``show`` passes the recipe's name as a JSON string).
    """
    redactor = Redactor.for_this_host() if redact is None else redact
    memo: dict[str, str] = {}  # step names and details repeat across reports

    def redact_once(text: str) -> str:
        done = memo.get(text)
        if done is None:
            done = redactor(text)
            if done == text:
                done = text  # the same object: callers can tell nothing changed
            if len(memo) < 100_000:
                memo[text] = done
        return done

    kept: dict[str, Evidence] = {}
    problems: list[Problem] = []
    files = 0
    total = 0
    seen_files: set[tuple[int, int]] = set()
    for root in paths:
        for path in _files(root, problems):
            try:
                st = path.stat()
            except OSError:
                st = None
            if st is not None:
                if (st.st_dev, st.st_ino) in seen_files:  # named twice (a folder and a file)
                    continue
                seen_files.add((st.st_dev, st.st_ino))
            files += 1
            try:
                for source, data in _documents(path, needle):
                    if isinstance(data, EvidenceError):
                        problems.append(Problem(source, data.message))
                        continue
                    try:
                        record = parse_document(data, redact_once, signatures=signatures)
                    except EvidenceError as exc:
                        problems.append(Problem(source, exc.message))
                        continue
                    total += 1
                    old = kept.get(record.key)
                    if old is None or _KIND_RANK[record.kind] < _KIND_RANK[old.kind]:
                        kept[record.key] = record
            except EvidenceError as exc:
                problems.append(Problem(str(path), exc.message))
    records = tuple(sorted(kept.values(), key=lambda r: (r.created, r.key), reverse=True))
    return EvidenceSet(records, tuple(problems), total - len(records), files)
