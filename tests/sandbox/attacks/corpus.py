"""The attack corpus as data: each attack is a whole script, its class and what it tries.

Every attack is run twice (``test_corpus``): through the checker (``revise check``'s code
path: it must reject, or accept only a script that is harmless when run) and with the
checker bypassed (``run_unchecked``) in both sandboxes, where it must be contained.

A script gets, through ``args``: ``secret_file`` (a 0600 file holding a secret token, in the
test's own temp dir), ``victim`` (that dir), ``home`` (the run's REVISE_HOME), ``host_pid``,
``marker`` (put in the argv of every process an attack starts, so a survivor can be found
in /proc), ``canary`` (a TCP port on 127.0.0.1 where the test listens) and ``redis_key``
(what an attack that reaches Redis would SET).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

CLASSES = ("checker", "runtime", "protocol", "process", "docker")


@dataclass(frozen=True)
class Attack:
    name: str
    kind: str  # one of CLASSES
    script: str  # the whole script, entry point included
    tries: str  # what it tries, in one line
    checker: str = "reject"  # or "harmless": accepted, and harmless when run
    statuses: frozenset[str] = frozenset({"stopped", "failed", "succeeded"})
    error: str | None = None  # the error type the run must end with, when it matters
    timeout: float = 8.0  # the envelope's sandbox.timeout_seconds
    calls: int = 0  # provider executions allowed (frames the host admitted)
    limits: dict[str, int] = field(default_factory=dict)  # other SandboxLimits fields


# ---- ways to the real builtins, each of which the checker must refuse ---------------------

_TAIL = '''
B = g["__builtins__"]
B = B if isinstance(B, dict) else B.__dict__
imp, open, OSError, Exception = B["__import__"], B["open"], B["OSError"], B["Exception"]
getattr, type, hasattr = B["getattr"], B["type"], B["hasattr"]
os = imp("os")
json = imp("json")
'''

ROUTES = {
    # a runtime class's function globals are the runtime module's
    "globals": 'g = CapabilityError.__init__.__globals__' + _TAIL,
    # a traceback's frame walks back into the runtime's scheduler
    "traceback": '''
try:
    1 // 0
except ZeroDivisionError as e:
    g = e.__traceback__.tb_frame.f_back.f_globals
''' + _TAIL,
    # the class tree from an empty tuple reaches os._wrap_close and os's globals
    "subclasses": '''
for c in ().__class__.__base__.__subclasses__():
    if c.__name__ == "_wrap_close":
        g = c.__init__.__globals__
''' + _TAIL,
}


def route_for(name: str) -> str:
    """Spread the sandbox attacks over the escape routes (the checker must refuse each)."""
    return sorted(ROUTES)[sum(map(ord, name)) % len(ROUTES)]


def script(body: str, *, route: str | None = "globals", before: str = "") -> str:
    """A whole script: optional top-level ``before``, then orchestrate with ``body``
    (after the escape ``route`` to real builtins, unless None)."""
    inner = (ROUTES[route] if route else "") + textwrap.dedent(body)
    return (textwrap.dedent(before) + "async def orchestrate(ctx, args):\n"
            + textwrap.indent(inner, "    "))


def attack(name: str, kind: str, body: str, tries: str, *, route: str | None = "globals",
           before: str = "", **options: object) -> Attack:
    return Attack(name, kind, script(body, route=route, before=before), tries,
                  **options)  # type: ignore[arg-type]
