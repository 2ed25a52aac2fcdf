"""Benchmark the server-rendered pages (dashboard, approval queue, sync runs) under gunicorn.

Usage::

    .venv/bin/python bench/web.py [--teams 1000] [--namespaces 5000] [--requests 40] [--skip-setup]

1. Creates the scratch database ``fairshare_bench_web`` (``psql -h 127.0.0.1 -U postgres -c
   'CREATE DATABASE fairshare_bench_web'``; its own, other benchmarks fill theirs) if missing,
   migrates it and, unless ``--skip-setup``, fills it (repeatable): ``--teams`` teams in 10
   departments, ``--namespaces`` namespaces spread over them, GPU/cpu/memory quotas per team, one
   capacity snapshot, the latest usage sample per namespace × resource, one share computation
   with a snapshot per team, an open idle-GPU alert per 10 teams, 300 pending quota requests
   (two lines each) and 30 sync runs of 16,000 items each (the size of a steady-state sync).
   Users: ``bench-admin`` (admins group) and ``bench-lead``, lead of one department (every
   tenth team, 100 of 1,000, sees them all on the dashboard).
2. Starts ``gunicorn config.wsgi`` with 2 workers on 127.0.0.1.
3. Signs each user in (a database session, sent as the ``sessionid`` cookie) and times, per
   page, ``--requests`` sequential GETs after two warm-up requests; prints p50/p95 in ms and
   the response size. The approval queue is admin-only (a lead gets 403, not timed).
4. Counts SQL queries per page in-process (Django test client) for both users.
Target (issue): p95 < 300 ms for the dashboard and the approval queue.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import create_database, free_port, pct, start_gunicorn  # noqa: E402

DB = "fairshare_bench_web"
os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB}")
os.environ.setdefault("SECRET_KEY", "bench-not-secret")
os.environ.setdefault("FAIRSHARE_CLUSTER", "disabled")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

GPU = "nvidia.com/gpu"
PAGES = {
    "dashboard": ("/", ("bench-admin", "bench-lead")),
    "approval queue": ("/approvals/", ("bench-admin",)),
    "requests list": ("/requests/", ("bench-admin", "bench-lead")),
    "sync runs": ("/sync/", ("bench-admin", "bench-lead")),
    "sync run (16k items)": ("/sync/{run}/", ("bench-admin", "bench-lead")),
}


def populate(teams: int, namespaces: int) -> None:
    from decimal import Decimal

    from django.contrib.auth.models import Group, User
    from django.db import connection, transaction
    from django.utils import timezone

    from monitoring.models import CapacitySnapshot, IdleGpuAlert, UsageSample
    from quotas.models import (
        Membership,
        Namespace,
        QuotaRequest,
        QuotaRequestLine,
        Team,
        TeamQuota,
    )
    from scheduling.models import ShareComputation, ShareSnapshot, SyncItem, SyncRun

    print(f"populating {teams} teams, {namespaces} namespaces ...", flush=True)
    started = time.monotonic()
    now = timezone.now().replace(microsecond=0)
    with transaction.atomic():
        for model in (SyncItem, SyncRun, ShareSnapshot, ShareComputation, IdleGpuAlert):
            model.objects.all().delete()
        UsageSample.objects.all().delete()
        CapacitySnapshot.objects.all().delete()
        QuotaRequestLine.objects.all().delete()
        QuotaRequest.objects.all().delete()
        for model in (Membership, Namespace, TeamQuota):
            model.objects.all().delete()
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM quotas_auditevent")
        Team.objects.filter(parent__isnull=False).delete()
        Team.objects.all().delete()

        depts = Team.objects.bulk_create(
            Team(slug=f"dept-{d}", name=f"Department {d}", cost_center=f"CC-{d}") for d in range(10)
        )
        Team.objects.bulk_create(
            Team(
                slug=f"team-{i:04d}",
                name=f"Team {i}",
                parent=depts[i % 10],
                cost_center=f"CC-{i % 10}",
                weight=1 + i % 5,
            )
            for i in range(teams)
        )
        leaves = list(Team.objects.filter(parent__isnull=False).order_by("slug"))
        Namespace.objects.bulk_create(
            Namespace(
                name=f"{leaves[i % len(leaves)].slug}-ns{i // len(leaves)}",
                team=leaves[i % len(leaves)],
            )
            for i in range(namespaces)
        )
        TeamQuota.objects.bulk_create(
            TeamQuota(team=t, resource=resource, guarantee=Decimal(g), limit=Decimal(lim))
            for t in leaves
            for resource, g, lim in ((GPU, 0, 8), ("cpu", 8, 64), ("memory", 2**34, 2**36))
        )
        CapacitySnapshot.objects.create(
            taken_at=now,
            source="bench",
            resources={GPU: "8000", "cpu": "128000", "memory": str(2**50)},
            flavors={"NVIDIA-H100-80GB-HBM3": {GPU: "8000"}},
            nodes=1000,
        )
        ns_rows = list(Namespace.objects.values_list("name", "team_id"))
        UsageSample.objects.bulk_create(
            (
                UsageSample(
                    taken_at=now,
                    team_id=team_id,
                    namespace=name,
                    resource=resource,
                    allocated=Decimal(amount),
                    pending=Decimal(0),
                )
                for name, team_id in ns_rows
                for resource, amount in ((GPU, 1), ("cpu", 4), ("memory", 2**33))
            ),
            batch_size=5000,
        )
        computation = ShareComputation.objects.create(computed_at=now, teams=len(leaves))
        ShareSnapshot.objects.bulk_create(
            ShareSnapshot(
                computation=computation,
                computed_at=now,
                team=t,
                dominant_share=0.001,
                dominant_resource=GPU,
                fair_allocation={GPU: "8", "cpu": "64"},
                fair_share=0.001,
            )
            for t in leaves
        )
        IdleGpuAlert.objects.bulk_create(
            IdleGpuAlert(
                team=t, namespace=f"{t.slug}-ns0", gpus=2, started_at=now, last_seen_at=now
            )
            for t in leaves[::10]
        )
        admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True})
        admin.groups.add(Group.objects.get_or_create(name="admins")[0])
        lead, _ = User.objects.get_or_create(username="bench-lead")
        Membership.objects.create(user=lead, team=depts[5], role="lead")
        requests = QuotaRequest.objects.bulk_create(
            QuotaRequest(team=t, requester=lead, justification=f"Sweep {i}.")
            for i, t in enumerate(leaves[:300])
        )
        QuotaRequestLine.objects.bulk_create(
            QuotaRequestLine(
                request=r, resource=resource, guarantee=Decimal(g), limit=Decimal(lim),
                previous_guarantee=Decimal(0), previous_limit=Decimal(8),
            )
            for r in requests
            for resource, g, lim in ((GPU, 4, 16), ("cpu", 16, 128))
        )  # fmt: skip
        with connection.cursor() as cursor:
            for _ in range(30):
                run = SyncRun.objects.create(
                    status="succeeded",
                    trigger="schedule",
                    started_at=now,
                    finished_at=now,
                    total=16000,
                    done=16000,
                    updated_count=16,
                    unchanged_count=15984,
                )
                # 16 objects per team: a few updated (with a diff), the rest unchanged.
                cursor.execute(
                    """
                    INSERT INTO scheduling_syncitem (run_id, kind, namespace, name, team_slug,
                        action, planned_action, drift, diff, error, attempts)
                    SELECT %s, 'ResourceQuota', t.slug || '-ns0', 'obj-' || g, t.slug,
                        CASE WHEN g = 0 AND t.id %% 60 = 0 THEN 'update' ELSE 'unchanged' END,
                        CASE WHEN g = 0 AND t.id %% 60 = 0 THEN 'update' ELSE 'unchanged' END,
                        false,
                        CASE WHEN g = 0 AND t.id %% 60 = 0
                            THEN 'update ResourceQuota x/fairshare' || chr(10)
                                 || '  spec.hard.requests.nvidia.com/gpu: 8 -> 16'
                            ELSE '' END,
                        '', 1
                    FROM quotas_team t CROSS JOIN generate_series(0, 15) g
                    WHERE t.parent_id IS NOT NULL
                    """,
                    [run.pk],
                )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"  {SyncItem.objects.count():,} sync items", flush=True)
    print(f"  populated in {time.monotonic() - started:.0f} s", flush=True)


def session_cookie(username: str) -> str:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username=username))
    return f"sessionid={client.cookies['sessionid'].value}"


def timed(url: str, cookie: str, n: int) -> tuple[list[float], int]:
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    size = 0
    for _ in range(2):  # warm both workers (imports, connections, template cache)
        urllib.request.urlopen(request, timeout=120).read()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as response:
            body = response.read()
            assert response.status == 200, (response.status, body[:200])
            assert b'action="/login/"' not in body, "not signed in"
        times.append(time.perf_counter() - started)
        size = len(body)
    return times, size


def query_counts(run_id: int) -> dict[tuple[str, str], int]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    counts = {}
    for page, (path, users) in PAGES.items():
        for username in users:
            client = Client()
            client.force_login(User.objects.get(username=username))
            url = path.format(run=run_id)
            client.get(url, HTTP_HOST="127.0.0.1")
            with CaptureQueriesContext(connection) as queries:
                assert client.get(url, HTTP_HOST="127.0.0.1").status_code == 200
            counts[(page, username)] = len(queries)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--skip-setup", action="store_true")
    args = parser.parse_args()

    create_database(DB)
    import django

    django.setup()
    from django.core.management import call_command

    from scheduling.models import SyncRun

    call_command("migrate", verbosity=0)
    if not args.skip_setup:
        populate(args.teams, args.namespaces)
    run_id = SyncRun.objects.order_by("-id").values_list("id", flat=True).first()
    cookies = {name: session_cookie(name) for name in ("bench-admin", "bench-lead")}

    port = free_port()
    server = start_gunicorn(port)
    try:
        print(f"\n{'page':24} {'user':12} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'KiB':>7}")
        for page, (path, users) in PAGES.items():
            for username in users:
                url = f"http://127.0.0.1:{port}{path.format(run=run_id)}"
                times, size = timed(url, cookies[username], args.requests)
                print(
                    f"{page:24} {username:12} {args.requests:>4} "
                    f"{pct(times, 50) * 1000:>8.0f} {pct(times, 95) * 1000:>8.0f} "
                    f"{size / 1024:>7.0f}",
                    flush=True,
                )
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{e.url}: HTTP {e.code}") from e
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    print(f"\n{'queries per request':36} {'queries':>8}")
    for (page, username), count in query_counts(run_id).items():
        print(f"{page + ' (' + username + ')':36} {count:>8}")


if __name__ == "__main__":
    main()
