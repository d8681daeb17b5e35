"""One Python file that runs the audit inside any interpreter: pyelftools and the inside
modules (:mod:`.inventory`, :mod:`.fatbin`, :mod:`.elfscan`, :mod:`.inside`) travel as a
zip in the file's text, are imported from that zip (``zipimport``; nothing is
installed) and print what :mod:`.inside` prints.

Why a file and not a mount: a probe target (a container, a remote engine) takes one
file (``put_archive``) and no bind mount need reach the engine's host. The zip is about
200 KB; it is made once per process.
"""

from __future__ import annotations

import base64
import io
import zipfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import elftools

#: The modules run inside, as the package ``envforge_audit_inside``.
INSIDE_MODULES = ("inventory.py", "fatbin.py", "elfscan.py", "inside.py")
PACKAGE = "envforge_audit_inside"

_BOOT = """\
import base64, os, sys, tempfile
_DATA = {data!r}
def _run():
    fd, path = tempfile.mkstemp(prefix="envforge-audit-", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(_DATA))
        sys.path.insert(0, path)
        from {package} import inside
        return inside.main()
    finally:
        os.unlink(path)
if __name__ == "__main__":
    sys.exit(_run())
"""


def _elftools_dir() -> Path:
    return Path(elftools.__file__).parent


@lru_cache(maxsize=1)
def bundle_zip() -> bytes:
    """pyelftools' sources and the inside modules, zipped."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        root = _elftools_dir()
        for path in sorted(root.rglob("*.py")):
            zf.write(path, f"elftools/{path.relative_to(root).as_posix()}")
        zf.writestr(f"{PACKAGE}/__init__.py", "")
        here = resources.files("envforge.audit")
        for name in INSIDE_MODULES:
            zf.writestr(f"{PACKAGE}/{name}", here.joinpath(name).read_text(encoding="utf-8"))
    return buf.getvalue()


def bundle_source() -> str:
    """The self-contained file's text: run it with any Python 3.9 or newer."""
    data = base64.b64encode(bundle_zip()).decode("ascii")
    return _BOOT.format(data=data, package=PACKAGE)
