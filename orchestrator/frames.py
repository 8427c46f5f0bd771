"""The host's check of a frame's fanout path against the admitted script (issue 28.1).

A sandbox that ignores the checker may name any fanout path; each new path is a new
identity, and a new identity is a new payment. The host admits a frame only at a path
the admitted script can give that site: as long as the site's static fanout nesting
(``Site.paths``, built from the host's own annotation), at each fanout the position of
the item written in place that leads to the site, else any index below the fanout's
width. A ctx.race replayed from the committed prefix runs its winner at the branch index
committed for it, which an earlier revision's race (wider, or ordered otherwise) may have
given: that index is admitted too, for that race only. A site whose paths have no static
shape (``Site.paths`` is None) is bounded by its call count (``Site.max_calls``) and the
envelope's budget alone.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.errors import SandboxProtocolError
from broker.prefix import Prefix
from orchestrator.site_paths import describe, fits
from orchestrator.sites import Site


class ReachablePaths:
    """``check(site, path)`` for every frame of one revision."""

    def __init__(self, storage_site: Callable[[str], str], prefix: Prefix) -> None:
        self._storage_site = storage_site
        self._raced: dict[str, frozenset[int]] = {}
        for identity, slot in prefix.races.items():
            index = slot.result.get("index") if isinstance(slot.result, dict) else None
            if isinstance(index, int) and not isinstance(index, bool):
                self._raced[identity.site] = self._raced.get(
                    identity.site, frozenset()) | {index}

    def committed_branches(self, race_site: str) -> frozenset[int]:
        """Branch indices committed for the race at ``race_site`` (a structural site)."""
        return self._raced.get(self._storage_site(race_site), frozenset())

    def check(self, site: Site, path: list[int]) -> None:
        """SandboxProtocolError unless ``path`` is one the admitted script can give
        ``site``."""
        if site.paths is None:
            return
        if any(fits(shape, path, self.committed_branches) for shape in site.paths):
            return
        raise SandboxProtocolError(
            f"a frame at {site.site} names fanout path {path}; the admitted script makes "
            f"that call only at paths {describe(site.paths)} (the fanouts around it): the "
            "sandbox named an identity the script cannot reach", site=site.site)
