"""import:NAME steps: every top-level module of the installed distribution NAME, as its
metadata lists them (top_level.txt, else RECORD): never a hand-written module map.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import importlib
import os
import re
import sys
import traceback

from .common import DETAIL_MAX, StepFailed, first_line, text_of


def canonical(name):
    """PEP 503 name: 'Pillow' -> 'pillow', 'typing_extensions' -> 'typing-extensions'."""
    out, dash = [], False
    for ch in name.lower():
        if ch in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(ch)
    return "".join(out)


def find_distribution(name):
    """The metadata folder (NAME-VERSION.dist-info / .egg-info) first on sys.path, or None."""
    want = canonical(name)
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for folder in names:
            stem, dot, kind = folder.rpartition(".")
            if (
                dot
                and kind in ("dist-info", "egg-info")
                and canonical(stem.split("-", 1)[0]) == want
            ):
                path = os.path.join(entry or ".", folder)
                if os.path.isdir(path):
                    return path
    return None


def read_meta(folder, name):
    try:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def dist_version(folder):
    text = read_meta(folder, "METADATA") or read_meta(folder, "PKG-INFO") or ""
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return os.path.basename(folder).rpartition(".")[0].partition("-")[2] or "?"


def module_of(path):
    """The top-level module a RECORD path installs, or None (metadata, scripts, .pth)."""
    head, sep, _ = path.replace("\\", "/").partition("/")
    if sep:
        if head.endswith((".dist-info", ".egg-info", ".data")) or head in ("..", "__pycache__"):
            return None
        return head
    if head.endswith(".py"):
        return head[:-3]
    if head.endswith((".so", ".pyd")):
        return head.split(".", 1)[0]
    return None


def top_level_modules(folder):
    """Importable top-level names of a distribution: top_level.txt, else RECORD's paths."""
    text = read_meta(folder, "top_level.txt")
    if text is not None:
        names = [line.strip().replace("\\", "/").split("/")[0] for line in text.splitlines()]
    else:
        import csv  # noqa: PLC0415 - RECORD only where top_level.txt is missing

        rows = csv.reader((read_meta(folder, "RECORD") or "").splitlines())
        names = [module_of(row[0]) for row in rows if row]
    return sorted({n for n in names if n and n.isidentifier() and not n.startswith("__")})


def make_import_step(name):
    def step_import(ctx):
        folder = find_distribution(name)
        if folder is None:
            ctx.module_errors[name] = "not installed"
            raise StepFailed(f"{name} is not installed (no {name} metadata on sys.path)")
        version = dist_version(folder)
        modules = top_level_modules(folder)
        asked = ctx.spec.get("skip_imports") or {}
        imported, skipped = [], []
        for module in modules:
            if module in asked:
                skipped.append((module, f"skip_imports: {asked[module]}"))
                continue
            why = import_or_fail(ctx, name, version, module, folder)
            if why is None:
                imported.append(module)
            else:
                skipped.append((module, why))
        detail = "{} {}: imported {}".format(name, version, ", ".join(imported) or "no modules")
        if skipped:
            detail += "; skipped " + "; ".join("{} ({})".format(*pair) for pair in skipped)
        data = {"distribution": name, "version": version, "modules": imported}
        if skipped:
            data["skipped"] = [{"module": m, "reason": r} for m, r in skipped]
        return detail, data

    return step_import


def import_or_fail(ctx, name, version, module, folder=None):
    """None when module imports; why it was skipped when it needs an extra that was not
    installed (:func:`missing_extra`); StepFailed otherwise."""
    try:
        importlib.import_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # ImportError, a broken .so's OSError, RuntimeError, ...
        why = missing_extra(ctx, name, folder, exc) if folder else None
        if why is not None:
            return why
        traceback.print_exc(file=sys.stderr)
        prefix = f"{name} {version}: import {module}: "
        ctx.module_errors[name] = first_line(exc)
        raise StepFailed(prefix + first_line(exc, max(120, DETAIL_MAX - len(prefix)))) from exc
    return None


#: A marker's ``extra == "d"`` (either way round).
EXTRA_MARKER = (r"""\bextra\s*==\s*["']([^"']+)["']""", r"""["']([^"']+)["']\s*==\s*extra\b""")


def requires_by_extra(folder):
    """(names required without an extra, {extra: names required only under it}) from
    the distribution's METADATA Requires-Dist lines (canonical names)."""
    text = read_meta(folder, "METADATA") or read_meta(folder, "PKG-INFO") or ""
    base, extras = set(), {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        if not line.lower().startswith("requires-dist:"):
            continue
        spec, _, marker = line.split(":", 1)[1].partition(";")
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if not found:
            continue
        req = canonical(found.group(1))
        named = [m for pattern in EXTRA_MARKER for m in re.findall(pattern, marker)]
        if not named:
            base.add(req)
        for extra in named:
            extras.setdefault(canonical(extra), set()).add(req)
    return base, extras


def missing_modules(exc):
    """Top-level names an ImportError says are missing, through its whole chain: a
    module that catches the ModuleNotFoundError and raises its own ImportError "from
    None" (blackd: "aiohttp dependency is not installed: No module named 'aiohttp'")
    still says which."""
    names, seen, current = [], [], exc
    while isinstance(current, ImportError) and current not in seen and len(seen) < 16:
        seen.append(current)
        found = [getattr(current, "name", None) or ""]
        found += re.findall(r"No module named '([^']+)'", text_of(current))
        for name in found:
            top = name.split(".")[0]
            if top and top not in names:
                names.append(top)
        current = current.__cause__ or current.__context__
    return names


def missing_extra(ctx, name, folder, exc):
    """Why an import that failed is skipped, or None when it is a failure.

    Skipped only when exc is an ImportError whose chain names missing modules
    (:func:`missing_modules`), none of them installed, each a distribution that ``name``
    requires only under extras the stack did not ask for ("blackd" needs aiohttp, which
    only black[d] requires). A name required without an extra, or under an extra that was
    asked for, is a failure: the environment lacks what it was meant to have."""
    missing = missing_modules(exc)
    if not missing or any(find_distribution(m) is not None for m in missing):
        return None
    base, extras = requires_by_extra(folder)
    asked = {canonical(e) for e in (ctx.spec.get("extras") or {}).get(name, ())}
    under = []
    for module in missing:
        wanted = canonical(module)
        these = sorted(extra for extra, names in extras.items() if wanted in names)
        if wanted in base or not these or asked.intersection(these):
            return None
        under += [extra for extra in these if extra not in under]
    return "needs {}, required only by {}, not installed".format(
        ", ".join(missing),
        " or ".join(f"{name}[{extra}]" for extra in under),
    )
