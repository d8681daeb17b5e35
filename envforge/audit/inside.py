"""The audit run inside an image: collect and read the ELF facts there, print one JSON
line (Python 3.9; stdlib and pyelftools only, both shipped in by :mod:`.bundle`).

``{"inventory": <the collector's object>, "facts": [<ElfFacts.to_dict()>, ...]}``
"""

from __future__ import annotations

import json
import sys

from .elfscan import scan
from .inventory import collect


def main() -> int:
    inventory = collect()
    reals = sorted({str(so["real"]) for so in inventory["shared_objects"]})  # type: ignore[attr-defined]
    facts = [scan(path).to_dict() for path in reals]
    sys.stdout.write(json.dumps({"inventory": inventory, "facts": facts}) + "\n")
    sys.stdout.flush()
    return 0
