"""An operator's write-back (`revise reconcile R ID --result F`) is checked before it commits.

A written-back result is replayed into every later revision as if the provider had
returned it, so it must be what the provider would have returned: the capability's
result shape (``broker.catalog``), and every artifact it references present in the
artifact store, or imported with it (``--artifact FILE``: the bytes the provider's
console shows, stored content-addressed; their id, size and media type must be the
ones the result names). Everything is checked before anything is stored; each error
names what is wrong and where.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from broker.artifacts import URI_SCHEME, ArtifactRef, ArtifactStore, artifact_id
from broker.catalog import lookup
from broker.errors import InputError


@dataclass(frozen=True)
class Imported:
    """A file given with ``--artifact``: its name (for messages) and its bytes."""

    name: str
    data: bytes

    @property
    def id(self) -> str:
        return artifact_id(self.data)


def _references(value: Any, where: str = "result") -> Iterator[tuple[str, str, ArtifactRef | None]]:
    """(where, artifact id, reference or None for a bare ``artifact://`` uri) in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{where}.{key}"
            if key == "artifact" and isinstance(item, dict):
                try:
                    ref = ArtifactRef.from_json(item)
                except InputError as exc:
                    raise InputError(f"{here}: {exc.message}") from None
                yield here, ref.id, ref
            else:
                yield from _references(item, here)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _references(item, f"{where}[{index}]")
    elif isinstance(value, str) and value.startswith(URI_SCHEME):
        yield where, value.removeprefix(URI_SCHEME), None


def check_write_back(capability: str, result: Any, artifacts: ArtifactStore,
                     imports: Sequence[Imported] = ()) -> None:
    """Raise InputError unless ``result`` is a ``capability`` result whose artifacts exist
    or are among ``imports``; then store the imports. Nothing is stored on an error."""
    lookup(capability).check_result(result)
    given = {item.id: item for item in imports}
    media: dict[str, str] = {}
    for where, ident, ref in _references(result):
        item = given.get(ident)
        if item is not None:
            if ref is not None and ref.size != len(item.data):
                raise InputError(f"{where} says {ref.size} bytes but {item.name} has "
                                 f"{len(item.data)}: is it the right file?")
            media.setdefault(ident, ref.media_type if ref is not None
                             else "application/octet-stream")
        elif not artifacts.exists(ident):
            raise InputError(f"{where} references artifact {ident}, which is not in the "
                             "artifact store; import the provider's file with --artifact "
                             "FILE (its SHA-256 must be that id)", artifact=ident)
    unused = [item for item in imports if item.id not in media]
    if unused:
        raise InputError(f"{unused[0].name} ({unused[0].id}) is not referenced by the result; "
                         "its artifact id must appear in the result")
    for ident, media_type in media.items():
        artifacts.put(given[ident].data, media_type)
