"""What a runner is given for one sandbox: the run, its RPC directory, its limits.

The RPC directory belongs to the host (mode 0755): the sandbox sees it
read-only and finds in it exactly one thing, the Unix socket the host listens
on. Everything the sandbox needs (script, args, config) and everything it
says (calls, result) travels over that socket, so the host never opens a path
the sandbox could have planted.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import shutil
import socket
import stat
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from broker.envelope import SandboxLimits
from broker.errors import SandboxError

SOCKET_NAME = "rpc.sock"
SANDBOX_RPC_DIR = "/rpc"  # where every runner shows the RPC directory to the sandbox
RUNTIME_DIR = "/opt/revise"  # where every runner shows runtime.py and language.py
RUNTIME_FILES = ("runtime.py", "language.py")
COMPILED_RUNTIME = "runtime.pyc"  # beside them where the sandbox's Python can run it
# language.py's bytecode where the runtime's `import language` looks for it first.
COMPILED_LANGUAGE = f"__pycache__/language.{sys.implementation.cache_tag}.pyc"
SANDBOX_DIR = Path(__file__).parent


def runtime_command(python: str = "python3", *, compiled: bool = False) -> list[str]:
    """The command a sandbox runs: the runtime, pointed at the socket (``-I``: isolated);
    ``compiled``: its bytecode (``compiled_file``) instead of its source."""
    name = COMPILED_RUNTIME if compiled else "runtime.py"
    return [python, "-I", "-S", "-B", f"{RUNTIME_DIR}/{name}", f"{SANDBOX_RPC_DIR}/{SOCKET_NAME}"]


def runtime_contents(*, compiled: bool) -> list[tuple[str, bytes]]:
    """What a process sandbox holds under ``RUNTIME_DIR``, by path: the runtime's files
    and, ``compiled``, their bytecode (``compiled_file``): runtime.pyc to run and
    language.py's .pyc where its import looks first."""
    sources = {name: (SANDBOX_DIR / name).read_bytes() for name in RUNTIME_FILES}
    if not compiled:
        return list(sources.items())
    return [*sources.items(),
            (COMPILED_RUNTIME, compiled_file(sources["runtime.py"], "runtime.py")),
            (COMPILED_LANGUAGE, compiled_file(sources["language.py"], "language.py"))]


@lru_cache(maxsize=4)
def compiled_file(source: bytes, name: str) -> bytes:
    """``source`` of the runtime file ``name`` compiled by this interpreter, as an
    unchecked hash-based .pyc. A script is compiled at every start (no cache applies to
    the program Python is asked to run), which was about 6 ms of CPU a job for
    runtime.py; a sandbox Python with this interpreter's bytecode magic
    (``importlib.util.MAGIC_NUMBER``) runs the .pyc directly instead. language.py
    compiled in the sandbox left 0.6 MB of the compiler's memory resident in each; its
    .pyc in ``__pycache__`` is read as it is. Keyed by the source, so a sandbox never runs
    another version than the file bound beside it."""
    code = compile(source, f"{RUNTIME_DIR}/{name}", "exec", dont_inherit=True)
    unchecked_hash = (1).to_bytes(4, "little")  # PEP 552 flags: hash-based, not checked
    return (importlib.util.MAGIC_NUMBER + unchecked_hash + importlib.util.source_hash(source)
            + marshal.dumps(code))


@dataclass(frozen=True)
class SandboxJob:
    run_id: str
    rpc_dir: Path
    limits: SandboxLimits

    @property
    def socket_path(self) -> Path:
        return self.rpc_dir / SOCKET_NAME


def open_rpc_dir(rpc_dir: Path) -> socket.socket:
    """Create a fresh host-owned RPC directory and listen on its socket.

    Whatever was at ``rpc_dir`` before (an earlier delivery's directory) is removed
    without following links. The socket is connectable by any uid (the sandbox's
    uid differs from the host's); the directory is not writable by it.
    """
    remove_rpc_dir(rpc_dir)
    rpc_dir.parent.mkdir(parents=True, exist_ok=True)
    rpc_dir.mkdir(mode=0o755)
    rpc_dir.chmod(0o755)  # mkdir's mode is filtered by the umask
    path = rpc_dir / SOCKET_NAME
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o666)
        listener.listen(4)
    except OSError as exc:
        listener.close()
        raise SandboxError(f"cannot listen on the sandbox socket {path}: {exc}") from None
    return listener


def remove_rpc_dir(rpc_dir: Path) -> None:
    """Remove an RPC directory; never follows a symlink out of it."""
    try:
        mode = os.lstat(rpc_dir).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(rpc_dir, ignore_errors=True)  # fd-based: does not follow symlinks
    else:
        os.unlink(rpc_dir)
