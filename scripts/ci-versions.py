"""Print the installed version of each direct dependency of envforge (scripts/test runs it
after installing the newest versions the package index serves), so a CI log says which
versions the tests ran against. Run with the venv's interpreter from the checkout's root."""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement


def main() -> int:
    text = Path("pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^name = "([^"]+)"', text, re.MULTILINE)
    if found is None:
        print("ci-versions: no project name in pyproject.toml", file=sys.stderr)
        return 1
    dist = found.group(1)
    print(f"direct dependencies of {dist} {version(dist)}, as installed:")
    for line in requires(dist) or []:
        req = Requirement(line)
        marker = f"  ({req.marker})" if req.marker else ""
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            installed = "not installed"
        print(f"  {req.name:<20} {installed:<14} wants {req.specifier or 'any'}{marker}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
