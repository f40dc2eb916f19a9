"""gpucast.fileio: output files reserved before the work (an unwritable destination fails at once)
and committed atomically (a later write failure is one OutputError, and no temporary file is left)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from read_only_dir import read_only_dir

from gpucast import fileio
from gpucast.fileio import OutputError, atomic_write_text, check_output_dir, reserve_output, reserve_outputs


def test_a_reservation_creates_its_temporary_file_now_and_commits_atomically(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old\n")
    with reserve_output(target, "--json") as out:
        temps = [p for p in tmp_path.iterdir() if p != target]
        assert len(temps) == 1 and temps[0].name.startswith(".r.json.")  # reserved before any work
        assert target.read_text() == "old\n"  # the old file stays until the commit
        assert atomic_write_text(out, "new\n") == target
    assert target.read_text() == "new\n"
    assert sorted(tmp_path.iterdir()) == [target]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # an ordinary file's mode, not mkstemp's 0600


def test_leaving_the_block_without_a_commit_removes_the_temporary_file(tmp_path):
    with pytest.raises(RuntimeError):
        with reserve_output(tmp_path / "x.html", "--report"):
            raise RuntimeError("the work failed")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where, words", [
    (lambda tmp: tmp / "missing" / "x.json", "directory"),
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: Path("/proc/gpucast-test.json"), "cannot create a file in directory '/proc'"),
])
def test_an_unwritable_destination_is_one_error_naming_the_flag(tmp_path, where, words):
    with pytest.raises(OutputError) as info:
        reserve_output(where(tmp_path), "--json")
    msg = str(info.value)
    assert msg.startswith("--json ") and words in msg and "\n" not in msg
    assert isinstance(info.value, ValueError)  # the command line's one-line errors
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_directory_is_refused(tmp_path):
    with read_only_dir(tmp_path / "ro") as ro:
        with pytest.raises(OutputError, match="cannot create a file in directory"):
            reserve_output(ro / "x.json", "--json")
        assert list(ro.iterdir()) == []


def test_a_write_failure_after_the_work_is_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old\n")
    out = reserve_output(target, "--json")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", full)
    with pytest.raises(OutputError) as info:
        out.write_text("x" * 10_000)
    assert str(info.value) == (f"--json {str(target)!r} could not be written (No space left on device); "
                               "no partial file is left")
    assert sorted(tmp_path.iterdir()) == [target] and target.read_text() == "old\n"


def test_two_outputs_naming_one_file_are_refused_and_none_is_kept(tmp_path):
    with pytest.raises(OutputError, match=r"^--report and --json name the same file"):
        reserve_outputs((tmp_path / "same", "--report"), (tmp_path / "same", "--json"))
    assert list(tmp_path.iterdir()) == []
    report, none, js = reserve_outputs((tmp_path / "a.html", "--report"), (None, "--svg"), (tmp_path / "a.json", "--json"))
    assert none is None and len(list(tmp_path.iterdir())) == 2
    fileio.discard((report, none, js))
    assert list(tmp_path.iterdir()) == []


def test_pending_reservations_are_removed_at_exit(tmp_path):
    reserve_output(tmp_path / "x.json", "--json")
    assert len(list(tmp_path.iterdir())) == 1
    fileio._discard_pending()  # what atexit runs when a command dies between reservation and commit
    assert list(tmp_path.iterdir()) == []


def test_an_output_directory_is_checked_without_creating_anything(tmp_path):
    check_output_dir(tmp_path / "run" / "parts", "--out")  # not there yet: its nearest parent is checked
    check_output_dir(tmp_path, "--out")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"^--out .*file' is not a directory$"):
        check_output_dir(tmp_path / "file", "--out")
    with pytest.raises(OutputError, match=r"^--save .*: '.*file' is not a directory$"):
        check_output_dir(tmp_path / "file" / "sub", "--save")
    with pytest.raises(OutputError, match=r"^--out '/proc/gpucast-x/run': cannot create files in '/proc'$"):
        check_output_dir("/proc/gpucast-x/run", "--out")


def test_a_relative_name_is_reserved_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with reserve_output("r.json", "--json") as out:
        out.write_text("{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
