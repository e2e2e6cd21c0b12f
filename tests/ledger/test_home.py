"""ACCORD_HOME is private: created 0700, its SQLite files 0600 (existing ones tightened), and
a home accord cannot use is one HomeError; a read never creates one."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from accord.ledger.errors import HomeError
from accord.ledger.events import make_entry
from accord.ledger.settings import Settings
from accord.ledger.wiring import open_store, operator_signer, prepare_home


def _settings(home: Path) -> Settings:
    return Settings.from_env({"ACCORD_HOME": str(home)})


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_is_0700_and_its_database_files_0600(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = _settings(home)
    previous = os.umask(0o022)
    try:
        store = open_store(settings)
        signer = operator_signer(settings)
        store.append(make_entry(signer, kind="note.added", seq=0, at=datetime.now(UTC)))
    finally:
        os.umask(previous)
    assert _mode(home) == 0o700
    files = [home / "accord.db", home / "accord.db-wal", home / "accord.db-shm"]
    assert all(path.exists() for path in files)
    assert {path.name: _mode(path) for path in files} == {path.name: 0o600 for path in files}


def test_an_existing_open_home_is_tightened(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    for name in ("accord.db", "accord.db-wal", "accord.db-shm"):
        (home / name).touch()
        (home / name).chmod(0o644)
    prepare_home(_settings(home))
    assert _mode(home) == 0o700
    assert {_mode(home / n) for n in ("accord.db", "accord.db-wal", "accord.db-shm")} == {0o600}


def test_a_read_never_creates_a_home(tmp_path: Path) -> None:
    home = tmp_path / "missing"
    with pytest.raises(HomeError) as caught:
        open_store(_settings(home), create=False)
    assert caught.value.missing
    assert not home.exists()
    home.mkdir()
    with pytest.raises(HomeError, match="no accord database"):
        open_store(_settings(home), create=False)
    assert list(home.iterdir()) == []


def test_a_file_is_no_home(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(HomeError, match="is not a folder"):
        open_store(_settings(path))
    with pytest.raises(HomeError, match="cannot create"):
        open_store(_settings(path / "below"))


def test_an_impossible_path_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(HomeError, match="cannot create"):
        prepare_home(_settings(Path("/proc/self/accord-home")))


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "theirs"
    home.mkdir()
    os.chown(home, 65534, 65534)
    with pytest.raises(HomeError, match="belongs to another user"):
        open_store(_settings(home))
    assert list(home.iterdir()) == []


@pytest.mark.skipif(os.getuid() == 0, reason="root writes anywhere")
def test_an_unwritable_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "locked"
    home.mkdir()
    home.chmod(0o500)
    try:
        with pytest.raises(HomeError, match="not writable"):
            open_store(_settings(home))
    finally:
        home.chmod(0o700)
