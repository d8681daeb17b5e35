"""Wheel variants (WheelNext): the variant metadata files read, a target's provider
properties made from its arch, and the variant an installer would pick.

A careful reader to the draft standard, not the reference library (``variantlib`` pulls
in pydantic and plugin machinery; this reads three JSON levels). Sources, each fact below
names its own:

* PEP 825 "Wheel Variants: Package Format" (Draft), https://peps.python.org/pep-0825/
  (text read at python/peps ``peps/pep-0825.rst``; clarifications python/peps#4969):
  the label in the wheel file name, ``*.dist-info/variant.json``,
  ``{name}-{version}-variants.json`` on the index, the property syntax, compatibility
  and the variant ordering algorithm;
* the NVIDIA provider, https://github.com/wheelnext/nvidia-variant-provider
  (``nvidia_variant_provider/plugin.py`` at 2ab96595): the values it reports for a GPU and
  a driver (``cuda_version_lower_bound``, ``cuda_version_upper_bound``, ``sm_arch``);
* AMD's ``rocm-bootstrap`` 0.3.0 (its README, https://github.com/pmoutsias-amd/rocm-systems/
  tree/develop/python/rocm-bootstrap, the text of its package page): the
  ``target → sub-family → family`` chain (``gfx1151 → gfx11_5 → gfx11``), and
  TheRock's wheel splitter, which writes the markers ``"amd :: gfx_arch :: gfx942" in
  variant_properties`` (ROCm/TheRock kpack): the namespace ``amd``, feature ``gfx_arch``.

Nothing here reads the network: :mod:`envforge.knowledge.variant_index` does.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import InvalidInput
from envforge.knowledge.arch import parse_gfx, parse_sm

#: Properties: namespace → feature → values (PEP 825 "Variants": three levels).
Properties = Mapping[str, Mapping[str, tuple[str, ...]]]

# PEP 825 "Variant properties": namespace and feature ``^[a-z0-9_]+$``, value
# ``^[a-z0-9_.]+$``.
_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_VALUE_RE = re.compile(r"^[a-z0-9_.]+$")
# PEP 825 "Variant label": ``^[0-9a-z_.]{1,16}$``; the 16-character cap was dropped in a
# later revision (discuss.python.org thread 106196), so labels are read at any length.
_LABEL_RE = re.compile(r"^[0-9a-z_.]+$")
#: PEP 825: the label ``null`` is reserved for the zero-property variant.
NULL_LABEL = "null"
# PEP 825 "Variant metadata": the format version is in the ``$schema`` URL; its text
# calls the structure 0.0.1 and its examples (and real variant.json files, e.g. the
# ascend-variant-provider's) name https://variants-schema.wheelnext.dev/v0.0.3.json.
# "Tools MUST assume that all variant wheels using an unknown format version are
# unsupported."
KNOWN_FORMATS = ("0.0.1", "0.0.3")
_SCHEMA_RE = re.compile(r"/v(\d+\.\d+\.\d+)\.json$")
#: variant.json / variants.json above this size are refused (real ones: kilobytes).
MAX_VARIANT_JSON = 1024 * 1024


@dataclass(frozen=True)
class VariantFile:
    """A ``variant.json`` (one label) or ``{name}-{version}-variants.json`` (every label
    the index has for that version), as PEP 825 "Variant metadata" lays it out."""

    schema: str
    #: ``default-priorities.namespace``: every namespace used, most important first
    namespaces: tuple[str, ...]
    #: ``default-priorities.feature``: per namespace, features most important first
    features: Mapping[str, tuple[str, ...]]
    #: ``default-priorities.property``: per namespace and feature, values best first
    values: Properties
    #: ``variants``: label → its properties
    variants: Mapping[str, Properties]
    source: str = ""

    @property
    def format(self) -> str | None:
        m = _SCHEMA_RE.search(self.schema)
        return m.group(1) if m else None

    @property
    def supported_format(self) -> bool:
        return self.format in KNOWN_FORMATS


def property_lines(props: Properties) -> tuple[str, ...]:
    """``nvidia :: sm_arch :: 90_real`` lines (PEP 825's serialisation), sorted."""
    return tuple(
        sorted(
            f"{ns} :: {feat} :: {v}"
            for ns, fs in props.items()
            for feat, vs in fs.items()
            for v in vs
        )
    )


def _bad(source: str, what: str) -> InvalidInput:
    return InvalidInput(
        f"{source}: not wheel variant metadata (PEP 825): {what}",
        hint="see https://peps.python.org/pep-0825/#variant-metadata",
    )


def _names(value: Any, source: str, where: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and pattern.match(v) for v in value
    ):
        raise _bad(source, f"{where} is not a list of names matching {pattern.pattern}")
    return tuple(value)


def _properties(value: Any, source: str, where: str) -> Properties:
    if not isinstance(value, dict):
        raise _bad(source, f"{where} is not an object")
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for ns, features in value.items():
        if not isinstance(ns, str) or not _NAME_RE.match(ns) or not isinstance(features, dict):
            raise _bad(source, f"{where}: namespace {ns!r} is not a name with an object")
        out[ns] = {}
        for feat, values in features.items():
            if not isinstance(feat, str) or not _NAME_RE.match(feat):
                raise _bad(source, f"{where}.{ns}: feature {feat!r} is not a name")
            out[ns][feat] = _names(values, source, f"{where}.{ns}.{feat}", _VALUE_RE)
    return out


def parse_variant_json(data: Any, *, source: str = "variant.json") -> VariantFile:
    """A variant.json / variants.json document (already decoded) checked to PEP 825's
    structure; :class:`InvalidInput` naming what is wrong. Keys PEP 825 does not define
    (``providers``, from PEP 817's drafts) are ignored."""
    if not isinstance(data, dict):
        raise _bad(source, "the document is not an object")
    schema = data.get("$schema")
    if not isinstance(schema, str):
        raise _bad(source, "no $schema URL")
    prio = data.get("default-priorities")
    if not isinstance(prio, dict):
        raise _bad(source, "no default-priorities object")
    namespaces = _names(prio.get("namespace"), source, "default-priorities.namespace", _NAME_RE)
    features = {
        ns: _names(v, source, f"default-priorities.feature.{ns}", _NAME_RE)
        for ns, v in _object(prio.get("feature", {}), source, "default-priorities.feature").items()
    }
    values = _properties(prio.get("property", {}), source, "default-priorities.property")
    variants: dict[str, Properties] = {}
    for label, props in _object(data.get("variants"), source, "variants").items():
        if not _LABEL_RE.match(label):
            raise _bad(source, f"variant label {label!r} does not match {_LABEL_RE.pattern}")
        variants[label] = _properties(props, source, f"variants.{label}")
        if label == NULL_LABEL and variants[label]:
            raise _bad(source, "the label 'null' is reserved for the zero-property variant")
        # PEP 825: default-priorities.namespace "MUST contain all namespaces used"
        missing = sorted(set(variants[label]) - set(namespaces))
        if missing:
            raise _bad(
                source,
                f"variant {label}: namespace {missing[0]} is not in default-priorities.namespace",
            )
    return VariantFile(schema, namespaces, features, values, variants, source)


def _object(value: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(source, f"{where} is not an object")
    return value


def read_variant_json(text: str | bytes, *, source: str) -> VariantFile:
    """:func:`parse_variant_json` of JSON text (bounded)."""
    if len(text) > MAX_VARIANT_JSON:
        raise _bad(source, f"larger than {MAX_VARIANT_JSON} bytes")
    try:
        data = loads(text if isinstance(text, str) else text.decode("utf-8", "replace"))
    except BadJSON as exc:
        raise _bad(source, f"invalid JSON ({exc})") from None
    return parse_variant_json(data, source=source)


def wheel_variant_json(wheel: Path) -> VariantFile:
    """The ``*.dist-info/variant.json`` of a variant wheel (PEP 825 "Variant metadata"),
    checked to hold the label of the wheel's file name."""
    label = wheel_label(wheel.name)
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [
                n
                for n in zf.namelist()
                if n.count("/") == 1
                and n.split("/")[0].endswith(".dist-info")
                and n.endswith("/variant.json")
            ]
            if len(names) != 1:
                raise _bad(str(wheel), f"{len(names)} *.dist-info/variant.json files (want 1)")
            info = zf.getinfo(names[0])
            if info.file_size > MAX_VARIANT_JSON:
                raise _bad(str(wheel), f"variant.json larger than {MAX_VARIANT_JSON} bytes")
            text = zf.read(info)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidInput(f"{wheel}: cannot read the wheel: {exc}") from None
    found = read_variant_json(text, source=f"{wheel.name}:{names[0]}")
    if label is None or label not in found.variants:
        raise _bad(found.source, f"it does not describe the file name's label {label!r}")
    return found


def wheel_label(filename: str) -> str | None:
    """The variant label of a wheel file name, None for a non-variant wheel.

    PEP 825 "Variant label": ``{distribution}-{version}(-{build tag})?-{python tag}-
    {abi tag}-{platform tag}(-{variant label})?.whl``. Six parts are ambiguous only in
    form: a build tag starts with a digit (PEP 427), a python tag never does, so the
    third part tells them apart."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[: -len(".whl")].split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        label = parts[-1]
        return label if _LABEL_RE.match(label) else None
    return None


# --------------------------------------------------------------------------- providers


@dataclass(frozen=True)
class Supported:
    """What a target machine supports, as its providers would report it: namespace →
    feature → values, most preferred first (PEP 825 "Variant ordering": "an ordered list
    of compatible values")."""

    properties: Properties
    #: how the target was described (``sm_90, CUDA 12.8``), for messages
    described: str = ""


# wheelnext/nvidia-variant-provider plugin.py: UMD_MAJOR_RANGE = range(11, 16),
# UMD_MINOR_RANGE = range(21); sm_arch below 5.0 reports nothing.
_UMD_MAJORS = range(11, 16)
_UMD_MINOR_MAX = 20


def _cuda_pair(cuda: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?", cuda.strip())
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def nvidia_properties(sm: str, cuda: str) -> dict[str, tuple[str, ...]]:
    """The ``nvidia`` namespace's values for a GPU ``sm`` (``sm_90``) under a driver whose
    CUDA version (the user-mode driver's, what ``nvidia-smi`` prints) is ``cuda``
    (``12.8``), as the provider reports them (plugin.py at 2ab96595,
    ``get_supported_configs``):

    * ``cuda_version_lower_bound`` (the wheel needs CUDA >= value): every version at or
      below the driver's, newest first, each major also bare (``12.8`` … ``12.0``, ``12``,
      ``11.20`` …);
    * ``cuda_version_upper_bound`` (the wheel needs CUDA < value): every version above
      it, from 15.20 down;
    * ``sm_arch`` (CMake's ``{major}{minor}_real|virtual``): real code of the same major
      at or below the GPU's minor, then the major's ``{major}0_virtual``.
    """
    out: dict[str, tuple[str, ...]] = {}
    umd = _cuda_pair(cuda)
    if umd is not None and umd[0] in _UMD_MAJORS and umd[1] <= _UMD_MINOR_MAX:
        major, minor = umd
        lower: list[str] = []
        for m in range(major, min(_UMD_MAJORS) - 1, -1):
            top = minor if m == major else _UMD_MINOR_MAX
            lower += [f"{m}.{n}" for n in range(top, -1, -1)] + [str(m)]
        upper: list[str] = []
        for m in range(max(_UMD_MAJORS), major - 1, -1):
            if m > major:
                upper += [f"{m}.{n}" for n in range(_UMD_MINOR_MAX, -1, -1)] + [str(m)]
            else:
                upper += [f"{m}.{n}" for n in range(_UMD_MINOR_MAX, minor, -1)]
        out["cuda_version_lower_bound"] = tuple(lower)
        out["cuda_version_upper_bound"] = tuple(upper)
    arch = parse_sm(sm)
    if arch is not None and (arch.major, arch.minor) >= (5, 0):
        real = [f"{arch.major}{n}_real" for n in range(arch.minor, -1, -1)]
        out["sm_arch"] = (*real, f"{arch.major}0_virtual")
    return out


def amd_properties(gfx: str) -> dict[str, tuple[str, ...]]:
    """The ``amd`` namespace's ``gfx_arch`` values for a GPU ``gfx`` (``gfx1151``): the
    target, then its sub-family and family, rocm-bootstrap's packaging chain
    (``packaging_chain("gfx1151")`` → ``gfx1151``, ``gfx11_5``, ``gfx11``; its
    ``--hierarchy`` output ``gfx1201 gfx12_0 gfx12``). That the variant plugin reports the
    whole chain as ``gfx_arch`` values, most specific first, is read from the splitter's
    device-wheel chain (``gfx1100 -> gfx11_0 -> gfx11``), not from the plugin's code."""
    arch = parse_gfx(gfx)
    if arch is None:
        return {}
    return {"gfx_arch": (arch.name, f"gfx{arch.major}_{arch.minor:x}", f"gfx{arch.major}")}


def supported_for(arch: str, cuda: str | None = None) -> Supported:
    """A target's :class:`Supported` from its arch (``sm_XX`` or ``gfxNNNN``) and, for
    NVIDIA, the CUDA version its driver provides (the stack's own CUDA version when the
    driver is not known: the variant built for that CUDA or below is then chosen)."""
    if parse_sm(arch) is not None:
        props = nvidia_properties(arch, cuda or "")
        return Supported({"nvidia": props}, f"{arch}" + (f", CUDA {cuda}" if cuda else ""))
    if parse_gfx(arch) is not None:
        return Supported({"amd": amd_properties(arch)}, arch)
    return Supported({}, arch)


# --------------------------------------------------------------------------- choosing


@dataclass(frozen=True)
class VariantChoice:
    """The variant an installer would pick for a target, or why none fits."""

    #: the chosen label; None when no variant is compatible
    label: str | None
    properties: tuple[str, ...] = ()
    #: compatible labels, best first
    ranked: tuple[str, ...] = ()
    #: label → why it does not fit the target
    refused: Mapping[str, str] = field(default_factory=dict)

    def why_none(self) -> str:
        return "; ".join(f"{label}: {why}" for label, why in sorted(self.refused.items()))


def incompatibility(props: Properties, supported: Supported) -> str | None:
    """Why a variant with ``props`` does not fit (None: it does). PEP 825 "Variant
    properties": "at least one value for every feature listed in its properties MUST be
    compatible with the system"; a variant with zero properties always is."""
    for ns, features in props.items():
        known = supported.properties.get(ns)
        if known is None:
            return f"no provider for namespace {ns} on {supported.described or 'this target'}"
        for feat, values in features.items():
            if not set(values) & set(known.get(feat, ())):
                return f"{ns} :: {feat} :: {'|'.join(values)} does not fit {supported.described}"
    return None


def choose(
    found: VariantFile, supported: Supported, labels: Sequence[str] | None = None
) -> VariantChoice:
    """The best compatible variant of ``found`` (among ``labels``, the ones the index has
    wheels for; None: all), by PEP 825's "Variant ordering" algorithm: namespaces,
    features and values ordered by ``default-priorities`` then by the provider's order;
    each variant keyed by its best value per feature, keys compared in order; a variant
    whose keys are a prefix of another's sorts after it; ties by label; ``null`` last."""
    if not found.supported_format:
        why = f"unknown variant format {found.schema!r} (known: {', '.join(KNOWN_FORMATS)})"
        return VariantChoice(None, refused=dict.fromkeys(found.variants, why))
    wanted = list(found.variants) if labels is None else [x for x in labels if x in found.variants]
    refused: dict[str, str] = {}
    fitting: list[str] = []
    for label in wanted:
        problem = incompatibility(found.variants[label], supported)
        if problem is None:
            fitting.append(label)
        else:
            refused[label] = problem
    if not fitting:
        return VariantChoice(None, refused=refused)
    order = _Order(found, supported)
    ranked = sorted(fitting, key=order.key)
    best = ranked[0]
    return VariantChoice(best, property_lines(found.variants[best]), tuple(ranked), refused)


class _Order:
    """PEP 825 "Variant ordering", steps 1 to 7."""

    def __init__(self, found: VariantFile, supported: Supported) -> None:
        self.found = found
        self.namespaces = list(found.namespaces)  # step 1
        self.features: dict[str, list[str]] = {}
        self.values: dict[str, dict[str, list[str]]] = {}
        for ns in self.namespaces:
            mine = supported.properties.get(ns, {})
            feats = list(found.features.get(ns, ()))  # step 2
            feats += [f for f in mine if f not in feats]
            self.features[ns] = feats
            self.values[ns] = {}
            for feat in feats:  # step 3
                vals = list(found.values.get(ns, {}).get(feat, ()))
                vals += [v for v in mine.get(feat, ()) if v not in vals]
                self.values[ns][feat] = vals

    def key(self, label: str) -> tuple[tuple[int, ...], ...]:
        props = self.found.variants[label]
        keys: list[tuple[int, int, int]] = []
        for ns, features in props.items():  # step 4: the best value of each feature
            for feat, values in features.items():
                order = self.values[ns][feat]
                best = min(order.index(v) for v in values if v in order)
                keys.append((self.namespaces.index(ns), self.features[ns].index(feat), best))
        # steps 5 to 7; (1,) ends each list so that a longer list sorts before its prefix
        ranked = tuple((0, *k) for k in sorted(keys))
        null_last = 1 if label == NULL_LABEL else 0
        return ((null_last,), *ranked, (1,), tuple(ord(c) for c in label))


# --------------------------------------------------------------------------- a chosen one


@dataclass(frozen=True)
class WheelVariant:
    """The variant chosen for one package of a stack: what the lock and the certificate
    record (absent for non-variant wheels)."""

    package: str
    version: str
    label: str
    properties: tuple[str, ...] = ()
    #: the ``{name}-{version}-variants.json`` it was read from
    source: str = ""
    #: ``sha256:<hex>`` of the label's wheels as the index lists them: a lock whose
    #: package line carries one of them installs this variant
    hashes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "label": self.label,
            "properties": list(self.properties),
            "source": self.source,
            "hashes": list(self.hashes),
        }

    def lock_line(self) -> str:
        """The lock's comment line for it (a comment: :func:`envforge.lock.check_lock`
        lets it be, and no installer reads it)."""
        props = ",".join(p.replace(" ", "") for p in self.properties)
        # one line whatever the index wrote: a URL with a space or a control character
        # (which no real index link has) is left out rather than break the lock
        source = self.source if _PRINTABLE_RE.match(self.source) else ""
        return (
            f"# envforge-variant: {self.package}=={self.version} label={self.label}"
            f" properties={props} hashes={','.join(self.hashes)} source={source}\n"
        )


_PRINTABLE_RE = re.compile(r"^[!-~]*$")
_LOCK_RE = re.compile(
    r"^# envforge-variant: (?P<package>[A-Za-z0-9._-]+)==(?P<version>\S+)"
    r" label=(?P<label>[0-9a-z_.]+) properties=(?P<props>\S*) hashes=(?P<hashes>\S*)"
    r" source=(?P<source>\S*)$"
)


def lock_variants(text: str) -> tuple[WheelVariant, ...]:
    """The variants a lock's ``# envforge-variant:`` lines record (none for older locks)."""
    found: list[WheelVariant] = []
    for line in text.splitlines():
        m = _LOCK_RE.match(line)
        if m:
            props = tuple(p.replace("::", " :: ") for p in m.group("props").split(",") if p)
            hashes = tuple(h for h in m.group("hashes").split(",") if h)
            found.append(
                WheelVariant(
                    m.group("package"),
                    m.group("version"),
                    m.group("label"),
                    props,
                    m.group("source"),
                    hashes,
                )
            )
    return tuple(found)


def variant_of(data: Mapping[str, Any]) -> WheelVariant | None:
    """The variant recorded in a stack's dict (a certificate's ``stack``), None without."""
    raw = data.get("variant")
    if not isinstance(raw, dict):
        return None
    try:
        return WheelVariant(
            str(raw["package"]),
            str(raw["version"]),
            str(raw["label"]),
            tuple(str(p) for p in raw.get("properties") or ()),
            str(raw.get("source", "")),
            tuple(str(h) for h in raw.get("hashes") or ()),
        )
    except KeyError:
        return None
