"""A full disk for fault tests: a tiny tmpfs mounted under the test's directory.

Mounting needs root (CAP_SYS_ADMIN), which the test machine and CI have; where it is
missing the tests that need a full disk are skipped with the reason, never faked.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def full_disk(where: Path, *, size_kib: int = 16) -> Iterator[Path]:
    """A directory on a tmpfs of ``size_kib`` KiB, filled to the last byte."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full disk: {mounted.stderr.strip()}")
    try:
        fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 1024):
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
