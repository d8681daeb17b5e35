"""The audit's collector: run by the target interpreter, it lists what is installed.

Standard library only, Python 3.9 and later, no envforge imports: envforge runs this file
with the interpreter being audited (``python -I -c SOURCE``; inside an image through
:mod:`.inside`) and reads one JSON object from its stdout:

``python``        version, executable, prefix, base_prefix, implementation
``markers``       the PEP 508 marker values (``python_version``, ``sys_platform``...) that
                  decide which ``Requires-Dist`` lines apply
``site_dirs``     the folders on ``sys.path`` that hold distributions (stdlib left out),
                  in ``sys.path`` order
``env``           the variables that change which GPU code or library is used
                  (``HSA_OVERRIDE_GFX_VERSION``, ``LD_LIBRARY_PATH``, ``LD_PRELOAD``)
``distributions`` each ``*.dist-info`` / ``*.egg-info``: name, version, ``Requires-Dist``,
                  its folder, how many files its RECORD lists, and the shared objects among
                  them with the size RECORD gives; ``shadowed`` when an earlier folder on
                  ``sys.path`` has the same name
``shared_objects`` every ``.so`` / ``.so.N`` in the site folders or a RECORD: its path,
                  the file it resolves to, whether it is a link, and the distributions
                  whose RECORD lists it
"""

from __future__ import annotations

import csv
import json
import os
import platform
import re
import site
import sys
import sysconfig

SO_RE = re.compile(r"\.so(\.[0-9]+)*$")
ENV_KEYS = ("HSA_OVERRIDE_GFX_VERSION", "LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_MODULE_LOADING")
#: RECORD lines read per distribution at most (torch has ~15,000).
MAX_RECORD_LINES = 500_000
csv.field_size_limit(1 << 20)


def _stdlib_dirs() -> set[str]:
    paths = sysconfig.get_paths()
    return {os.path.normpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}


def site_dirs() -> list[str]:
    """Folders on sys.path that can hold distributions, in order, stdlib left out."""
    stdlib = _stdlib_dirs()
    found: list[str] = []
    candidates = list(sys.path)
    user = site.getusersitepackages() if sys.prefix == sys.base_prefix else None
    if isinstance(user, str):
        candidates.append(user)
    for entry in candidates:
        path = os.path.normpath(os.path.abspath(entry or "."))
        if (
            path in found
            or path in stdlib
            or os.path.basename(path) == "lib-dynload"
            or not os.path.isdir(path)
            or not entry
        ):
            continue
        found.append(path)
    return found


def walked(path: str) -> bool:
    """Site folders are walked for shared objects; folders a ``.pth`` adds (a project's
    source tree) are known by their distributions' RECORD only."""
    return os.path.basename(path) in ("site-packages", "dist-packages")


def _headers(text: str) -> dict[str, list[str]]:
    """The header fields of a METADATA / PKG-INFO text (folded lines joined)."""
    fields: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0] in " \t" and last is not None:
            fields[last][-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip().lower()
        fields.setdefault(last, []).append(value.strip())
    return fields


def _read(path: str, limit: int = 4 << 20) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def _record(meta_dir: str, site_dir: str) -> tuple[int, list[list[object]]]:
    """(files RECORD lists, [absolute path, size or None] of its shared objects)."""
    record = os.path.join(meta_dir, "RECORD")
    listed = os.path.join(meta_dir, "installed-files.txt")
    rows: list[list[str]] = []
    base = site_dir
    if os.path.isfile(record):
        with open(record, newline="", encoding="utf-8", errors="replace") as f:
            for i, row in enumerate(csv.reader(f)):
                if i >= MAX_RECORD_LINES:
                    break
                if row:
                    rows.append(row)
    elif os.path.isfile(listed):
        base = meta_dir
        rows = [[line.strip()] for line in _read(listed).splitlines() if line.strip()]
    shared: list[list[object]] = []
    for row in rows:
        if SO_RE.search(row[0]):
            size = row[2] if len(row) > 2 and row[2].isdigit() else None
            path = os.path.normpath(os.path.join(base, row[0]))
            shared.append([path, int(size) if size else None])
    return len(rows), shared


def distribution(meta_dir: str, site_dir: str) -> dict[str, object] | None:
    """One installed distribution, or None when its metadata cannot be read."""
    name_file = "METADATA" if meta_dir.endswith(".dist-info") else "PKG-INFO"
    try:
        fields = _headers(_read(os.path.join(meta_dir, name_file)))
        files, shared = _record(meta_dir, site_dir)
    except OSError:
        return None
    name = (fields.get("name") or [""])[0]
    if not name:
        return None
    return {
        "name": name,
        "version": (fields.get("version") or [""])[0],
        "requires": fields.get("requires-dist", []),
        "metadata_dir": meta_dir,
        "site_dir": site_dir,
        "files": files,
        "shared": shared,
    }


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(dirs: list[str]) -> list[dict[str, object]]:
    seen: set[str] = set()
    out: list[dict[str, object]] = []
    for site_dir in dirs:
        try:
            names = sorted(os.listdir(site_dir))
        except OSError:
            continue
        for entry in names:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            meta = os.path.join(site_dir, entry)
            if not os.path.isdir(meta):
                continue
            dist = distribution(meta, site_dir)
            if dist is None:
                continue
            key = _canonical(str(dist["name"]))
            dist["shadowed"] = key in seen
            seen.add(key)
            out.append(dist)
    return out


def _walk(root: str) -> list[str]:
    found: list[str] = []
    for folder, subdirs, files in os.walk(root):
        subdirs[:] = [
            d for d in subdirs if not d.endswith((".dist-info", ".egg-info")) and d != "__pycache__"
        ]
        found.extend(os.path.join(folder, name) for name in files if SO_RE.search(name))
    return found


def shared_objects(dirs: list[str], dists: list[dict[str, object]]) -> list[dict[str, object]]:
    owners: dict[str, list[str]] = {}
    for dist in dists:
        for path, _size in dist["shared"]:  # type: ignore[attr-defined]
            owners.setdefault(str(path), []).append(str(dist["name"]))
    paths = [p for d in dirs if walked(d) for p in _walk(d)]
    paths.extend(owners)
    out: list[dict[str, object]] = []
    done: set[str] = set()
    for path in paths:
        norm = os.path.normpath(path)
        if norm in done or not os.path.isfile(norm):
            continue
        done.add(norm)
        out.append(
            {
                "path": norm,
                "real": os.path.realpath(norm),
                "link": os.path.islink(norm),
                "owners": owners.get(norm, []),
            }
        )
    return out


def markers() -> dict[str, str]:
    """PEP 508 marker values of this interpreter (as packaging's default_environment)."""
    impl = sys.implementation
    info = impl.version
    version = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return {
        "implementation_name": impl.name,
        "implementation_version": version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def collect() -> dict[str, object]:
    dirs = site_dirs()
    dists = distributions(dirs)
    return {
        "schema": 1,
        "python": {
            "version": ".".join(str(n) for n in sys.version_info[:3]),
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "implementation": sys.implementation.name,
        },
        "markers": markers(),
        "site_dirs": dirs,
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "distributions": dists,
        "shared_objects": shared_objects(dirs, dists),
    }


def main() -> int:
    sys.stdout.write(json.dumps(collect()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
