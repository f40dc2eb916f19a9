"""A directory no process may create files in, for the tests of unwritable outputs.

Without root, ``chmod 0555`` makes it; root ignores permission bits, so for root the directory gets
the immutable attribute (``chattr +i``: even root cannot create files in it, EPERM), which ext4, XFS
and btrfs have. Only where neither works (root on a filesystem without the attribute, or without
CAP_LINUX_IMMUTABLE) does a test skip, and it says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only_dir(path: Path):
    """Make ``path`` (a new directory) read-only for this process while the block runs."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root writes into read-only directories, and chattr +i (the immutable attribute) is not "
                    "available on this filesystem to make one it cannot write")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(path)], capture_output=True, check=True)
