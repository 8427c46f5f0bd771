"""Every ``REVISE_*`` variable something reads, and the misspelt ones.

The names come from every layer's settings (the run's ``broker.settings.Settings``,
the process sandbox's ``ProcessSettings``, the queue's ``WorkerSettings`` and
``FlowerSettings``), so the
list is composed here, above all of them. A ``REVISE_*`` variable that nothing reads
is a warning with the nearest real name, logged once when a ``revise`` command or a
worker starts; ``revise config --check`` makes it an error (exit 2). It is not an
error at start-up because a stale variable must not stop a running deployment's
workers, but it is never silently ignored.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.settings import PREFIX, Settings, env_names
from workers.config import FlowerSettings, WorkerSettings

# REVISE_* names read outside the settings classes: by compose.yaml (REVISE_DB_PASSWORD,
# REVISE_HOST_HOME, REVISE_DOCKER_GID), sandbox/image.py and the shell scripts under
# sandbox/, and the tests and benchmarks. Known names, never reported as misspellings.
OTHER_VARIABLES = frozenset({
    "REVISE_DB_PASSWORD", "REVISE_HOST_HOME", "REVISE_DOCKER_GID",
    "REVISE_SANDBOX_BASE_IMAGE", "REVISE_BASE_MIRROR",
    "REVISE_BASE_TAG", "REVISE_BASE_SUITE", "REVISE_DOCKERD_LOG", "REVISE_DOCKER_STORAGE",
    "REVISE_ENGINE_WAIT",
    "REVISE_TEST_REDIS_DB", "REVISE_CRASH_RUNS", "REVISE_BENCH_REDIS_DB",
    "REVISE_BENCH_REDIS_URL", "REVISE_FLOOR_PREFIX", "REVISE_FLOOR_DATABASE_URL"})
_log = logging.getLogger("revise.settings")


def known_variables() -> frozenset[str]:
    """Every REVISE_* name something reads: the settings classes' and OTHER_VARIABLES."""
    # Loaded only when a name is not one of the usual ones: the sandbox policy costs a
    # noticeable part of a short command's start.
    from sandbox.process_profile import ProcessSettings

    classes = (Settings, WorkerSettings, ProcessSettings, FlowerSettings)
    return frozenset(name for cls in classes for name in env_names(cls)) | OTHER_VARIABLES


@dataclass(frozen=True)
class UnknownVariable:
    name: str
    nearest: str | None

    def line(self) -> str:
        hint = (f"did you mean {self.nearest}?" if self.nearest
                else "`revise config` lists every setting")
        return f"{self.name} is not a Revise setting and is ignored; {hint}"


def unknown_variables(environ: Mapping[str, str] | Iterable[str]) -> list[UnknownVariable]:
    """The REVISE_* names in ``environ`` nothing reads, each with its nearest known name
    (names are matched without regard to case, as the settings read them)."""
    names = {n.upper() for n in environ if n.upper().startswith(PREFIX)}
    if names <= _usual_names():
        return []
    known = known_variables()
    # Compared without the common prefix, which would make every name look close.
    tails = {name.removeprefix(PREFIX): name for name in known}
    return [UnknownVariable(name, next(
        (tails[t] for t in difflib.get_close_matches(name.removeprefix(PREFIX), tails, n=1)),
        None)) for name in sorted(names - known)]


@functools.cache
def _usual_names() -> frozenset[str]:
    """The names known without loading the sandbox policy (the usual case)."""
    return frozenset(env_names(Settings) + env_names(WorkerSettings)
                     + env_names(FlowerSettings)) | OTHER_VARIABLES


def warn_unknown(environ: Mapping[str, str]) -> None:
    """One warning line per REVISE_* name nothing reads, once per process and set of names."""
    _warn_once(frozenset(n for n in environ if n.upper().startswith(PREFIX)))


@functools.cache
def _warn_once(names: frozenset[str]) -> None:
    for unknown in unknown_variables(names):
        _log.warning("%s", unknown.line())
