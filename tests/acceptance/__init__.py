"""Acceptance checks of the sandboxes, against the real image and the real bwrap; run from
a checkout (the harness is not part of the installed product):

    python -m tests.acceptance [--runner docker|process|all] [--only TEXT] [--pipeline]
                               [--attacks]

``probes``: hostile programs in a sandbox the production runner starts, judged from the
host. ``--runner`` picks the Docker sandbox (the default, on the pinned image), the
bubblewrap process sandbox, or both. ``--pipeline`` adds end-to-end checks of the host
side of the socket that are not attacks (``pipeline``). ``--attacks`` adds a subset of
the attack corpus of ``tests/sandbox/attacks``, run and judged by its own harness
(``attacks``). ``--only TEXT`` keeps the checks whose name contains TEXT (``attack:``,
``pipeline:``, ``process: pids``). Prints a pass/fail table; exit 0 only when every
check passes.
"""
