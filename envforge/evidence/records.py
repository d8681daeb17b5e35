"""Evidence: probe reports and certificates read from files and folders, as frozen records.

What is read (each recognised by its content, not its file name, by the first kind of
:data:`envforge.evidence.kinds.KINDS` that recognises it; an export names its kind):

* a probe report, ``probe.json`` (:meth:`envforge.probe.report.ProbeReport.to_json`,
  schema ``envforge.probe/1``), as ``envforge probe --report DIR`` and ``build``/``certify
  --report DIR`` write it;
* a certificate of any backend (:class:`envforge.publish.certificate.Certificate`, schema
  ``envforge.certificate/3``, ``/2`` or ``/1``): the files of the local store
  (``$ENVFORGE_HOME/certificates/<hex>.json``), the ``certificate.json`` that ``--report
  DIR`` writes beside ``probe.json``, a venv's ``.envforge/certified.json``. Its digest
  is checked: an altered certificate is reported, not read. A venv's ``certified.json``
  from before format 3 (:func:`~envforge.publish.certificate.legacy_venv`) is read too,
  as kind ``venv``;
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.core.fsutil import read_limited, read_reason
from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.lazy import LazyModule
from envforge.errors import EnvforgeError
from envforge.evidence.kinds.signed_probe import FILE_NAME as SIGNED_REPORT
from envforge.evidence.model import (
    DETAIL_LIMIT,
    EXPORT_SCHEMA,
    OUTCOMES,
    VENDORS,
    Evidence,
    EvidenceError,
    EvidenceSet,
    Kind,
    Outcome,
    Problem,
    _redacted_step,
    _str,
    from_report,
    parse_time,
)
from envforge.evidence.redact import Redactor as Redactor  # noqa: PLC0414 - re-exported
from envforge.evidence.run_facts import Gpu as Gpu  # noqa: PLC0414 - re-exported
from envforge.knowledge.table import CompatTable
from envforge.probe.report import StepResult

if TYPE_CHECKING:
    from envforge.evidence.kinds.base import EvidenceKind

#: Imported when a record is read (the kinds read records: their modules load the
#: certificate's).
_kinds = LazyModule("envforge.evidence.kinds")


def _from_export(data: Mapping[str, Any], redact: Callable[[str], str]) -> Evidence:
    outcome = data["outcome"]
    if outcome not in OUTCOMES:
        raise EvidenceError(f"key 'outcome' is not one of {', '.join(OUTCOMES)}: {outcome!r}")
    known: Mapping[str, EvidenceKind] = _kinds.KINDS
    kind = data.get("kind", "probe")
    if not isinstance(kind, str) or kind not in known:
        raise EvidenceError(
            f"key 'kind' is {kind!r}, not one of {', '.join(known)} (export it again "
            "with the envforge that recorded it: envforge evidence export)"
        )
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
        # an export names a signer but carries no signature to check: a claim, not kept
        # (signed evidence is a certificate whose signature was verified)
        signer="",
        site=_str(data.get("site")),
        node=_str(data.get("node")),
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
    known: Mapping[str, EvidenceKind] = _kinds.KINDS
    if not isinstance(data, dict):
        raise EvidenceError("not an envforge report: expected a JSON object")
    schema = data.get("schema")
    if schema == EXPORT_SCHEMA:
        return _from_export(data, redact)
    for kind in known.values():
        if kind.recognises(data):
            return kind.read(data, redact, signatures=signatures, table=table)
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
                if name == "probe.json" and SIGNED_REPORT in names:
                    continue  # the same run: probe --report's signed copy, as kept
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

    rank: dict[str, int] = _kinds.ranks()
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
                    if old is None or rank[record.kind] < rank[old.kind]:
                        kept[record.key] = record
            except EvidenceError as exc:
                problems.append(Problem(str(path), exc.message))
    records = tuple(sorted(kept.values(), key=lambda r: (r.created, r.key), reverse=True))
    return EvidenceSet(records, tuple(problems), total - len(records), files)


__all__ = [
    "DETAIL_LIMIT",
    "EXPORT_SCHEMA",
    "OUTCOMES",
    "VENDORS",
    "Evidence",
    "EvidenceError",
    "EvidenceSet",
    "Gpu",
    "Kind",
    "Outcome",
    "Problem",
    "Redactor",
    "documents",
    "from_report",
    "missing_paths",
    "parse_document",
    "parse_time",
    "read_evidence",
]
