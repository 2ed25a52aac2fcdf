"""``python -m config.migrate``: ``manage.py migrate --noinput`` that any number of pods may run at
once (deploy/base/web.yaml runs it as the web pods' init container).

Every web pod of a new release runs it before gunicorn starts, so applying a new image needs
no Job to delete. Two pods starting together must not both apply the same migration (the second
would fail on "relation already exists"): on PostgreSQL the run holds a session advisory lock
(``pg_advisory_lock``), so the others wait, then find nothing left to apply. SQLite serializes
writers by itself (and is not for a cluster).
"""

from __future__ import annotations

import os
import sys

# Any bigint that no other advisory lock of this database uses: "fairshare" in ASCII, truncated.
LOCK_KEY = 0x6661697273686172


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    args = ["migrate", "--noinput", *(sys.argv[1:] if argv is None else argv)]
    if connection.vendor != "postgresql":
        call_command(*args)
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
    try:
        call_command(*args)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
