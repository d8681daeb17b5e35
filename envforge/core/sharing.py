"""What of a run may leave the site: its name, and whether node names go with it.

Two settings of the site (:data:`envforge.core.settings.KEYS`; not a project's):

* ``site`` (``ENVFORGE_SITE``): a short name the site chose for itself (``lumi``,
  ``csc.mahti``), recorded in every probe report it runs (``host.site``) and shared with
  its evidence: a matrix built from several sites' evidence can tell them apart;
* ``share_node_names`` (``ENVFORGE_SHARE_NODE_NAMES=1``, default off): whether the name of
  the node a scheduler ran a probe on stays in what leaves the site (certificates and the
  attestations made from them, signed probe reports, ``evidence export`` lines). Off, it
  is removed there; the site's own evidence store keeps it either way, so the site can
  trace a failing cell to a node to drain (``matrix --by node``, ``show --by-node``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from envforge.core.settings import resolve
from envforge.errors import ConfigError

#: A site's name: what a person types, and safe in a file name or a URL.
SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Sharing:
    """The site's name ("" when not set) and whether node names may leave it."""

    site: str = ""
    node_names: bool = False

    def shared_node(self, node: str | None) -> str | None:
        """``node`` as it may leave the site: itself when the site opted in, else None."""
        return node if self.node_names else None


def sharing(environ: Mapping[str, str] | None = None) -> Sharing:
    """The site's settings (the environment, else the user's file); a site name that is
    not :data:`SITE_NAME` is one line naming where it was set."""
    settings = resolve(environ=environ, keys=("site", "share_node_names"))
    site = settings.text("site") or ""
    if site and not SITE_NAME.fullmatch(site):
        raise ConfigError(
            settings.get("site").origin,
            "site",
            f"{site[:80]!r} is not a site name (letters, digits, '.', '_' and '-', at most 64)",
            hint='write it as site = "lumi"',
        )
    return Sharing(site, settings.switch("share_node_names"))
