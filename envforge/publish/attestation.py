"""Certification attestations: in-toto Statements v1 in signed DSSE envelopes (pure).

Every certification can be told to others as a Statement (``_type``
``https://in-toto.io/Statement/v1``) whose **subject** is what was certified and whose
**predicate** (``predicateType`` :data:`PREDICATE_TYPE`) is the probe's verdict, signed
in a DSSE envelope (:mod:`envforge.publish.dsse`) with the site's ed25519 key:

* Docker: the subject is the certified image, named by its tag, with the digest of its
  image ID (the sha256 of its config, which carries the certificate label; a registry's
  manifest names it as ``config.digest``, and pushing does not change it);
* venv: the subject is ``venv/<recipe>`` with :func:`venv_digest`, a sha256 over the
  venv's content digests (each distribution's RECORD files, by content, and the venv's own
  files: :func:`envforge.backends.venvscan.content_digests`) and its interpreter.

The predicate's fields and their types are the JSON schema
``envforge/publish/schemas/certification-v1.schema.json`` (also the documentation);
:func:`schema_problems` checks a predicate against that file, so one file says what a
valid predicate is. Files hold one envelope per line (``*.intoto.jsonl``, the in-toto
bundle convention).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from envforge.core.fsutil import append_text, read_limited, read_reason, write_atomically
from envforge.core.jsonlimits import loads
from envforge.errors import InvalidInput
from envforge.publish.dsse import INTOTO_PAYLOAD_TYPE, Envelope, sign
from envforge.publish.signing import SigningKey
from envforge.version import __version__

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://envforge.dev/certification/v1"
SCHEMA_FILE = Path(__file__).parent / "schemas" / "certification-v1.schema.json"
#: The file name of a venv's attestations (in its ``.envforge`` folder) and the suffix of
#: the store's files.
ATTESTATIONS_NAME = "attestations.intoto.jsonl"
SUFFIX = ".intoto.jsonl"
#: Bytes an attestation file may have (one envelope: a few kilobytes).
MAX_FILE_BYTES = 64 * 1024 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _hex(digest: str) -> str:
    """``sha256:<hex>`` or ``<hex>`` -> ``<hex>`` (:class:`ValueError` otherwise)."""
    value = digest.split(":", 1)[1] if digest.startswith("sha256:") else digest
    if not _HEX64.fullmatch(value):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return value


@dataclass(frozen=True)
class Subject:
    """What a statement is about: a name and the sha256 of its content."""

    name: str
    sha256: str  # 64 hex digits

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": self.sha256}}

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256


def image_subject(name: str, image_id: str) -> Subject:
    """A Docker image by its ID (``sha256:<hex>``, the config digest)."""
    return Subject(name, _hex(image_id))


def venv_digest(content: Mapping[str, Any], python: str, interpreter: str) -> str:
    """``sha256:<hex>`` over a venv's content digests and its interpreter (version and
    the executable its ``pyvenv.cfg`` names)."""
    body = {"content": dict(content), "python": python, "interpreter": interpreter}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def venv_subject(recipe: str, digest: str) -> Subject:
    return Subject(f"venv/{recipe}", _hex(digest))


# --------------------------------------------------------------------------- predicate

_STEP_KEYS = ("name", "status", "seconds")
_GPU_KEYS = ("name", "arch", "vendor", "pci_id")


def _redacted(value: Any, redact: Any) -> Any:
    return redact(value) if isinstance(value, str) and redact is not None else value


def host_facts(host: Mapping[str, Any], redact: Any = None) -> dict[str, Any]:
    """The host facts a stored report keeps (kernel, machine, GPUs, driver, anonymous
    id), strings through ``redact`` (a :class:`envforge.evidence.redact.Redactor`); the
    node's name, GPU grants and fleet task are left out."""
    gpus = [
        {k: _redacted(g.get(k), redact) for k in _GPU_KEYS if k == "name" or g.get(k)}
        for g in host.get("gpus") or ()
        if isinstance(g, Mapping)
    ]
    return {
        "kernel": _redacted(str(host.get("kernel", "")), redact),
        "machine": str(host.get("machine", "")),
        "driver": _redacted(host.get("driver"), redact),
        "id": host.get("id") or None,
        "gpus": [{**g, "name": str(g.get("name", ""))} for g in gpus],
    }


def _result(steps: Sequence[Mapping[str, Any]]) -> str:
    statuses = [str(s.get("status")) for s in steps]
    if not statuses or any(s not in ("pass", "warn", "skip") for s in statuses):
        return "FAILED"
    return "WARNED" if "warn" in statuses else "PASSED"


def predicate(
    *,
    report: Mapping[str, Any],
    backend: str,
    recipe: Mapping[str, str],
    stack: Mapping[str, Any] | None = None,
    certificate: str | None = None,
    redact: Any = None,
) -> dict[str, Any]:
    """The certification predicate of a probe report (its ``to_dict()``); ``recipe``:
    ``name``, ``hash`` (``sha256:…``), ``stack_tag``."""
    rows = [
        (str(s["name"]), str(s["status"]), float(s["seconds"]))
        for s in report.get("steps") or ()
        if isinstance(s, Mapping)
    ]
    steps = [{"name": n, "status": st, "seconds": sec} for n, st, sec in rows]

    def named(*statuses: str) -> list[str]:
        return [n for n, st, _ in rows if st in statuses]

    data: dict[str, Any] = {
        "result": _result(steps),
        "configuration": [
            {"name": f"recipe:{recipe['name']}", "digest": {"sha256": _hex(recipe["hash"])}}
        ],
        "passedTests": named("pass"),
        "warnedTests": named("warn"),
        "failedTests": named("fail", "hang", "crash", "oom", "no-device"),
        "backend": backend,
        "recipe": {k: str(recipe[k]) for k in ("name", "hash", "stack_tag")},
        "level": str(report.get("level", "")),
        "steps": steps,
        "host": host_facts(report.get("host") or {}, redact),
        "issuedAt": str(report.get("created", "")),
        "envforgeVersion": __version__,
    }
    if stack is not None:
        data["stack"] = loads(canonical(dict(stack)))  # exactly what JSON keeps
    if certificate is not None:  # an image's certificate (a venv has none in this form)
        data["certificate"] = certificate
    return data


def statement(
    subject: Subject, pred: Mapping[str, Any], also: Sequence[Subject] = ()
) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_dict() for s in (subject, *also)],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(pred),
    }


def attest(
    subject: Subject, pred: Mapping[str, Any], key: SigningKey, also: Sequence[Subject] = ()
) -> Envelope:
    """The signed envelope of the statement about ``subject`` (and ``also``: the same
    image by its registry manifest digest, where one is known)."""
    return sign(canonical(statement(subject, pred, also)), key, INTOTO_PAYLOAD_TYPE)


def manifest_subject(pinned: str) -> Subject:
    """``HOST/REPO@sha256:…`` as a subject: the repository, the manifest digest (what
    cosign-style verifiers compare with the image they check)."""
    name, _, digest = pinned.partition("@")
    return Subject(name, _hex(digest))


def resigned(raw: Any, extra: Subject, key: SigningKey) -> Envelope | None:
    """The statement of the envelope ``raw`` with ``extra`` among its subjects, signed
    by ``key`` (None when ``raw`` is not one of our statements)."""
    try:
        data = loads(Envelope.from_dict(raw).payload)
    except ValueError:
        return None
    if statement_problems(data):
        return None
    if extra.sha256 not in (s.sha256 for s in subjects_of(data)):
        data["subject"] = [*data["subject"], extra.to_dict()]
    return sign(canonical(data), key, INTOTO_PAYLOAD_TYPE)


# --------------------------------------------------------------------------- schema


@lru_cache(maxsize=1)
def predicate_schema() -> Mapping[str, Any]:
    loaded: Mapping[str, Any] = loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "number": (int, float),
    "integer": (int,),
    "null": (type(None),),
}


def _type_ok(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    for name in kinds:
        if isinstance(value, bool) and name in ("number", "integer"):
            continue
        if isinstance(value, _TYPES[name]):
            return True
    return False


def _scalar_problems(value: Any, schema: Mapping[str, Any], where: str) -> list[str]:
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    if "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{where}: not of type {schema['type']}"]
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return [f"{where}: {value[:80]!r} does not match {schema['pattern']}"]
        if len(value) < schema.get("minLength", 0):
            return [f"{where}: empty"]
    if isinstance(value, (int, float)) and value < schema.get("minimum", value):
        return [f"{where}: below {schema['minimum']}"]
    return []


def _object_problems(value: Mapping[str, Any], schema: Mapping[str, Any], where: str) -> list[str]:
    props: Mapping[str, Any] = schema.get("properties", {})
    problems = [f"{where}: lacks {k!r}" for k in schema.get("required", ()) if k not in value]
    if schema.get("additionalProperties") is False:
        problems += [f"{where}: unknown field {k!r}" for k in value if k not in props]
    for key, sub in props.items():
        if key in value:
            problems += schema_problems(value[key], sub, f"{where}.{key}")
    return problems


def schema_problems(
    value: Any, schema: Mapping[str, Any] | None = None, where: str = "predicate"
) -> list[str]:
    """What in ``value`` the JSON schema ``schema`` (default: the predicate's) refuses;
    the keywords its file uses (type, enum, required, properties, additionalProperties,
    items, pattern, minLength, minimum)."""
    schema = predicate_schema() if schema is None else schema
    problems = _scalar_problems(value, schema, where)
    if problems:
        return problems
    if isinstance(value, dict):
        return _object_problems(value, schema, where)
    if isinstance(value, list) and "items" in schema:
        out: list[str] = []
        for number, item in enumerate(value):
            out += schema_problems(item, schema["items"], f"{where}[{number}]")
        return out
    return []


def statement_problems(data: Any) -> list[str]:
    """What makes ``data`` not an in-toto Statement v1 with our predicate."""
    if not isinstance(data, dict):
        return ["the payload is not a JSON object"]
    if data.get("_type") != STATEMENT_TYPE:
        return [f"_type is {data.get('_type')!r}, not {STATEMENT_TYPE}"]
    if data.get("predicateType") != PREDICATE_TYPE:
        return [f"predicateType is {data.get('predicateType')!r}, not {PREDICATE_TYPE}"]
    subjects = data.get("subject")
    if (
        not isinstance(subjects, list)
        or not subjects
        or not all(
            isinstance(s, dict)
            and isinstance(s.get("digest"), dict)
            and isinstance(s["digest"].get("sha256"), str)
            for s in subjects
        )
    ):
        return ["subject is not a list of descriptors with a sha256 digest"]
    return schema_problems(data.get("predicate"))


def subjects_of(data: Mapping[str, Any]) -> tuple[Subject, ...]:
    return tuple(
        Subject(str(s.get("name", "")), str(s["digest"]["sha256"]))
        for s in data.get("subject") or ()
    )


# --------------------------------------------------------------------------- files


def envelope_line(envelope: Envelope) -> str:
    return json.dumps(envelope.to_dict(), separators=(",", ":"), sort_keys=True) + "\n"


def append(path: Path, envelope: Envelope, *, setting: str = "--attest") -> None:
    """Add ``envelope`` as one line of ``path`` (created with its folder when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    append_text(path, envelope_line(envelope), setting=setting)


def keep_for_subject(path: Path, envelope: Envelope, subject: Subject) -> None:
    """Write ``path`` with the envelopes it holds about ``subject`` and ``envelope``
    (a venv's file: attestations of content it no longer has are dropped)."""
    kept: list[str] = []
    for raw in read_raw(path, missing_ok=True):
        try:
            env = Envelope.from_dict(raw)
            data = loads(env.payload)
            if subject.sha256 in (s.sha256 for s in subjects_of(data)):
                kept.append(json.dumps(raw, separators=(",", ":"), sort_keys=True) + "\n")
        except (ValueError, KeyError, TypeError):
            continue
    write_atomically(path, "".join([*kept, envelope_line(envelope)]))


def read_raw(path: Path, *, missing_ok: bool = False) -> list[Any]:
    """The JSON values of an attestation file: one per line, or one JSON document (an
    envelope written out whole); :class:`InvalidInput` naming the file and line."""
    try:
        text = read_limited(path, MAX_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        if missing_ok:
            return []
        raise InvalidInput(
            f"{path}: no such file", hint="name an .intoto.jsonl file or a venv folder"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = read_reason(exc, path) if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidInput(
            f"{path}: cannot read: {reason}", hint="name an .intoto.jsonl file or a venv folder"
        ) from None
    try:
        whole = loads(text, max_bytes=MAX_FILE_BYTES)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    values: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(loads(line))
        except ValueError:
            raise InvalidInput(
                f"{path}:{number}: not a JSON envelope",
                hint="one DSSE envelope per line (.intoto.jsonl)",
            ) from None
    return values


def store_path(root: Path, subject: Subject) -> Path:
    """Where the state dir keeps an image's attestations."""
    return root / (subject.sha256 + SUFFIX)


def names(values: Iterable[Subject]) -> str:
    return ", ".join(f"{s.name}@{s.digest[:19]}" for s in values)
