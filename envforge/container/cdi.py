"""CDI (Container Device Interface) specs on this host: which vendors' GPUs have names (pure).

A CDI spec (``/etc/cdi/*.yaml|json``, ``/var/run/cdi/*.yaml|json``, written by
``nvidia-ctk cdi generate`` or ``amd-ctk cdi generate``) declares a ``kind`` such as
``nvidia.com/gpu`` and its ``devices`` by name; an engine that supports CDI then injects
a device requested as ``nvidia.com/gpu=all``. Specs are read with the bounded readers
(:func:`envforge.core.yamlcheck.load_file`: JSON is YAML), so a huge, hostile or broken file
is skipped with a note, never a hang or a traceback. The roots are parameters for tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from envforge.core.yamlcheck import load_file
from envforge.errors import DataFileError

#: Where engines look for CDI specs (static, then generated at boot).
CDI_ROOTS: tuple[Path, ...] = (Path("/etc/cdi"), Path("/var/run/cdi"))
#: The CDI kinds of the GPU vendors envforge knows.
VENDOR_KINDS: dict[str, str] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
_MAX_SPEC_BYTES = 4 * 1024 * 1024
_MAX_SPECS = 64


@dataclass(frozen=True)
class CdiSpec:
    """One spec file: its kind and device names."""

    path: Path
    kind: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class CdiInventory:
    """The CDI specs found under the roots, and the files that could not be used."""

    specs: tuple[CdiSpec, ...] = ()
    notes: tuple[str, ...] = ()

    def devices_of(self, kind: str) -> tuple[str, ...]:
        """Fully qualified names (``kind=name``) of the devices of ``kind``."""
        return tuple(f"{s.kind}={d}" for s in self.specs if s.kind == kind for d in s.devices)

    def request_for(self, vendor: str) -> str | None:
        """The name to request all of ``vendor``'s GPUs by, or None when no spec names them.

        ``KIND=all`` when a spec declares an ``all`` device (nvidia-ctk and amd-ctk do),
        else the first device declared.
        """
        kind = VENDOR_KINDS.get(vendor)
        if kind is None:
            return None
        names = self.devices_of(kind)
        if not names:
            return None
        return f"{kind}=all" if f"{kind}=all" in names else names[0]

    def where(self, vendor: str) -> str:
        kind = VENDOR_KINDS.get(vendor, "")
        paths = sorted({str(s.path) for s in self.specs if s.kind == kind})
        return ", ".join(paths)


def _spec_files(roots: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        try:
            entries = sorted(root.iterdir())
        except OSError:
            continue
        files += [p for p in entries if p.suffix in (".yaml", ".yml", ".json")]
    return files[:_MAX_SPECS]


def parse_spec(path: Path) -> CdiSpec:
    """Read one spec; :class:`DataFileError` (one line naming the file and key) when unusable."""
    data = load_file(path, max_bytes=_MAX_SPEC_BYTES)
    if not isinstance(data, dict):
        raise DataFileError(str(path), "", "is not a CDI spec (a mapping with kind and devices)")
    kind = data.get("kind")
    if not isinstance(kind, str) or "/" not in kind:
        raise DataFileError(str(path), "kind", "missing or not VENDOR/CLASS (e.g. nvidia.com/gpu)")
    raw = data.get("devices")
    if not isinstance(raw, list):
        raise DataFileError(str(path), "devices", "missing or not a list")
    names: list[str] = []
    for i, dev in enumerate(raw):
        name = dev.get("name") if isinstance(dev, dict) else None
        if not isinstance(name, str) or not name:
            raise DataFileError(str(path), f"devices[{i}].name", "missing or not text")
        names.append(name)
    return CdiSpec(path, kind, tuple(names))


def scan(roots: Sequence[Path] = CDI_ROOTS) -> CdiInventory:
    """Every readable spec under ``roots``; unreadable ones become notes."""
    specs: list[CdiSpec] = []
    notes: list[str] = []
    for path in _spec_files(roots):
        try:
            specs.append(parse_spec(path))
        except DataFileError as exc:
            notes.append(f"CDI spec skipped: {exc.one_line()}")
    return CdiInventory(tuple(specs), tuple(notes))
