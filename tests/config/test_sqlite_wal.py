"""The embedded SQLite database lets pages read while a background job writes (issue 29: demo
pages stalled 5-11 s while the worker or the GPU feed held the write lock).

Run in a subprocess with ``DATABASE_URL`` pointing at a scratch SQLite file, so it holds on
whichever database the suite itself uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import threading, time
    import django
    django.setup()
    from django.db import connection, connections
    from django.db.utils import OperationalError

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        print("journal", cursor.fetchone()[0])
        cursor.execute("PRAGMA synchronous")
        print("synchronous", cursor.fetchone()[0])
        cursor.execute("PRAGMA busy_timeout")
        print("busy_timeout", cursor.fetchone()[0])
        cursor.execute("CREATE TABLE probe (n integer)")
        cursor.execute("INSERT INTO probe VALUES (1)")

    # A writer that holds the strongest lock a commit takes, like a job mid-commit ...
    held = threading.Event()
    release = threading.Event()

    def writer():
        with connections["default"].cursor() as cursor:
            cursor.execute("BEGIN EXCLUSIVE")
            cursor.execute("INSERT INTO probe VALUES (2)")
            held.set()
            release.wait(30)
            cursor.execute("COMMIT")
        connections["default"].close()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    # ... and a page's read meanwhile, on its own connection, with a short wait for locks.
    reader = connection.get_new_connection({**connection.get_connection_params(), "timeout": 1})
    started = time.monotonic()
    try:
        count = reader.execute("SELECT count(*) FROM probe").fetchone()[0]
        print("read", count, round(time.monotonic() - started, 3))
    except Exception as error:  # the rollback journal: "database is locked"
        print("blocked", type(error).__name__, error)
    finally:
        release.set()
        thread.join()
    """
)


def _run(tmp_path: Path) -> dict[str, list[str]]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'wal.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "FAIRSHARE_DEBUG": "true",
        "FAIRSHARE_VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = {}
    for line in done.stdout.splitlines():
        key, *rest = line.split()
        lines[key] = rest
    return lines


def test_the_sqlite_database_reads_while_a_writer_holds_its_lock(tmp_path):
    found = _run(tmp_path)
    assert found["journal"] == ["wal"]
    assert found["synchronous"] == ["1"]  # NORMAL
    assert int(found["busy_timeout"][0]) == 20000  # OPTIONS timeout 20 s: writers wait, not fail
    assert "blocked" not in found, found
    count, seconds = found["read"]
    assert count == "1"  # the committed row; the writer's is not visible yet
    # A read that waited for the writer would have failed after its 1 s lock timeout ("blocked"
    # above); this bound only catches a hang, not a slow machine.
    assert float(seconds) < 5
