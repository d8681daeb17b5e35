"""Audit an environment through a probe target: an image's container (no GPU, no
network) or any other :class:`~envforge.probe.target.ProbeTarget`.

The self-contained file of :mod:`.bundle` runs where the target runs its worker: it
collects and reads the ELF facts there (the files are in the image, not on this host)
and prints them as one JSON line; the checks run here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from envforge.audit.bundle import bundle_source
from envforge.audit.collect import MAX_INVENTORY_BYTES
from envforge.audit.elfscan import facts_from_dict
from envforge.audit.model import Collected, inventory_from_dict
from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import Unavailable, printable
from envforge.probe.target import ProbeTarget

#: Seconds the audit may take inside a target (container start included).
TARGET_TIMEOUT = 300.0


def collect_target(
    target: ProbeTarget, env: Mapping[str, str] | None = None, timeout: float = TARGET_TIMEOUT
) -> Collected:
    """Run the bundled audit in ``target``; its inventory and facts. :class:`Unavailable`
    when it cannot start, prints nothing usable or runs past ``timeout``."""
    deadline = time.monotonic() + timeout
    found: str | None = None
    with target.start(bundle_source(), "{}", dict(env or {})) as handle:
        while found is None:
            left = deadline - time.monotonic()
            if left <= 0:
                handle.stop()
                raise Unavailable(f"the audit in {target.description} ran past {timeout:g} s")
            line = handle.read_line(left)
            if line == "":
                break
            if line is not None and line.startswith('{"inventory"'):
                found = line
        if found is None:
            code, sig = handle.exit_status()
            tail = (handle.stderr_tail(5).strip().splitlines() or [f"exit {sig or code}"])[-1]
            raise Unavailable(
                f"the audit in {target.description} printed nothing: {printable(tail)}",
                hint="the image needs Python 3.9 or newer",
            )
    try:
        data = loads(found, max_bytes=MAX_INVENTORY_BYTES)
        inventory = inventory_from_dict(data["inventory"])
        facts = {str(f["path"]): facts_from_dict(f) for f in data["facts"]}
    except (BadJSON, KeyError, TypeError, ValueError) as exc:
        raise Unavailable(
            f"the audit in {target.description} printed no inventory: {printable(str(exc))}"
        ) from None
    return Collected(inventory, facts, target.description)


def collect_image(ref: str, targets: Sequence[ProbeTarget]) -> Collected:
    """Audit image ``ref`` through ``targets`` (its containers, one per interpreter name
    to try): the first that runs the audit."""
    last: Unavailable | None = None
    for target in targets:
        try:
            collected = collect_target(target)
        except Unavailable as exc:
            last = exc
            continue
        return Collected(collected.inventory, collected.facts, f"image {printable(ref)}")
    raise last or Unavailable(f"no interpreter to run the audit in {printable(ref)}")
