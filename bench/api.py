"""Benchmark the REST API's chargeback report and a paginated list under gunicorn.

Usage::

    .venv/bin/python bench/api.py [--teams 1000] [--requests 30] [--skip-setup]

1. Creates the scratch database ``fairshare_bench_api`` (``psql -h 127.0.0.1 -U postgres``; not
   ``fairshare_bench``, which other benchmarks fill) if missing, migrates it and, unless
   ``--skip-setup``, fills it (seeded, repeatable):
   ``--teams`` teams in 10 departments, one namespace and one GPU budget each, rate cards for 8
   resources (the GPU price changes on 2025-07-01), **daily** rollups for every team × 8
   resources × 365 days of 2025 (2.92 M rows for 1,000 teams), **hourly** rollups for
   2025-11-01 and 2025-12-01 (the edge days of the offset month below; 384 k rows) and the
   **monthly** rollups of 2025 computed from the daily ones by the rollup service
   (``rollups.rollup_months``, 96 k rows), as the hourly job keeps them.
   A year of hourly rows (70 M) is not generated: reports read monthly rollups for whole months,
   daily ones for the other whole days and hourly ones only for partial days, so whole-day
   reports never touch them. The GPU price changes on a month boundary, so every month of 2025
   is read from monthly rows (``--no-monthly`` leaves them out: the daily-only baseline).
2. Starts ``gunicorn config.wsgi`` with 2 workers on 127.0.0.1 (throttles raised for the run).
3. Times, with an admin's bearer token: the chargeback report grouped by team for one calendar
   month (Nov 2025), for one month with mid-day edges (hourly rows read), for the whole year,
   and page 1 (50 rows) of a paginated list (``/api/v1/usage-rollups/?period=day&team=...``),
   and prints p50/p95 per case.
4. Counts SQL queries per request in-process (Django test client), for the admin (every team)
   and for a lead of one team: the same number, whatever the number of teams.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import create_database, free_port, pct, start_gunicorn  # noqa: E402

DB = "fairshare_bench_api"  # its own: other benchmarks fill fairshare_bench
os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB}")
os.environ.setdefault("SECRET_KEY", "bench-not-secret")
os.environ.setdefault("FAIRSHARE_CLUSTER", "disabled")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
for scope in ("USER", "CHARGEBACK", "INGEST"):
    os.environ.setdefault(f"FAIRSHARE_API_RATE_{scope}", "100000/min")

RESOURCES = [
    ("nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", "2.50", 8),
    ("nvidia.com/mig-1g.10gb", "", "0.40", 14),
    ("cpu", "", "0.04", 64),
    ("memory", "", "0.005", 512 * 2**30),
    ("ephemeral-storage", "", "0.0001", 1024 * 2**30),
    ("rdma/rdma-shared", "", "0.10", 2),
    ("hugepages-2Mi", "", "0.001", 8 * 2**30),
    ("example.com/fpga", "", "1.20", 1),
]
CASES = {
    "chargeback month (Nov 2025, by team)": "/api/v1/chargeback/?start=2025-11-01&end=2025-12-01",
    "chargeback month, mid-day edges": (
        "/api/v1/chargeback/?start=2025-11-01T12:00:00Z&end=2025-12-01T12:00:00Z"
    ),
    "chargeback year (2025, by team)": "/api/v1/chargeback/?start=2025-01-01&end=2026-01-01",
    "list usage-rollups page 1 (50)": "/api/v1/usage-rollups/?period=day&team=team-0500",
}


def populate(teams: int, monthly: bool = True) -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from django.contrib.auth.models import Group, User
    from django.db import connection, transaction

    from monitoring.models import RateCard, UsageRollup
    from monitoring.rollups import rollup_months
    from quotas.models import Budget, Membership, Namespace, Team

    print(f"populating {teams} teams ...", flush=True)
    started = time.monotonic()
    with transaction.atomic():
        UsageRollup.objects.all().delete()
        RateCard.objects.all().delete()
        Budget.objects.all().delete()
        Membership.objects.all().delete()
        Namespace.objects.all().delete()
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
        Namespace.objects.bulk_create(Namespace(name=f"{t.slug}-ml", team=t) for t in leaves)
        Budget.objects.bulk_create(
            Budget(team=t, resource="nvidia.com/gpu", monthly_hours=Decimal(4000)) for t in leaves
        )
        since, change = datetime(2024, 1, 1, tzinfo=UTC), datetime(2025, 7, 1, tzinfo=UTC)
        for resource, _flavor, price, _ in RESOURCES:
            RateCard.objects.create(
                resource=resource, price_per_unit_hour=Decimal(price), valid_from=since
            )
        RateCard.objects.create(
            resource="nvidia.com/gpu",
            flavor="NVIDIA-H100-80GB-HBM3",
            price_per_unit_hour=Decimal("3.10"),
            valid_from=since,
            valid_to=change,
        )
        RateCard.objects.create(
            resource="nvidia.com/gpu",
            flavor="NVIDIA-H100-80GB-HBM3",
            price_per_unit_hour=Decimal("2.80"),
            valid_from=change,
        )
        admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True})
        admin.groups.add(Group.objects.get_or_create(name="admins")[0])
        lead, _ = User.objects.get_or_create(username="bench-lead")
        Membership.objects.create(user=lead, team=leaves[len(leaves) // 2], role="lead")
        resources = ", ".join(
            f"('{r}', '{f}', {scale})" for r, f, _, scale in RESOURCES
        )  # trusted constants
        with connection.cursor() as cursor:
            cursor.execute("SELECT setseed(0.42)")
            for period, first, last, step, hours in (
                ("day", "2025-01-01", "2025-12-31", "1 day", 24),
                ("hour", "2025-11-01 00:00", "2025-11-01 23:00", "1 hour", 1),
                ("hour", "2025-12-01 00:00", "2025-12-01 23:00", "1 hour", 1),
            ):
                cursor.execute(
                    f"""
                    INSERT INTO monitoring_usagerollup (period, start, team_id, namespace,
                        resource, flavor, allocated_hours, pending_hours, used_hours,
                        guarantee_hours, avg_utilization, samples)
                    SELECT %s, s, n.team_id, n.name, r.res, r.flavor, a, 0,
                        round((a * random())::numeric, 6), round((r.scale * {hours} * 0.5
                        * random())::numeric, 6), NULL, 0
                    FROM generate_series(%s::timestamptz, %s::timestamptz, %s::interval) s
                    CROSS JOIN quotas_namespace n
                    CROSS JOIN (VALUES {resources}) AS r(res, flavor, scale)
                    CROSS JOIN LATERAL (SELECT round((r.scale * {hours} * random())::numeric, 6)
                        AS a) alloc
                    """,
                    [period, f"{first}+00", f"{last}+00", step],
                )
        if monthly:
            rollup_months(datetime(2025, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
        print(f"  {UsageRollup.objects.count():,} rollup rows", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"  populated in {time.monotonic() - started:.0f} s", flush=True)


def token_for(username: str) -> str:
    from django.contrib.auth.models import User

    from quotas.models import ApiToken
    from quotas.tokens import issue_token

    user = User.objects.get(username=username)
    ApiToken.objects.filter(user=user).delete()
    return issue_token(owner=user, name="bench").raw


def timed(url: str, token: str, n: int) -> list[float]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    times = []
    for _ in range(2):  # warm both workers (imports, connections)
        urllib.request.urlopen(request, timeout=120).read()
    for _ in range(n):
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as response:
            body = response.read()
            assert response.status == 200, (response.status, body[:200])
        times.append(time.perf_counter() - started)
    return times


def query_counts() -> dict[str, tuple[int, int]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    counts = {}
    clients = {}
    for name in ("bench-admin", "bench-lead"):
        client = Client()
        client.force_login(User.objects.get(username=name))
        clients[name] = client
    for case, path in CASES.items():
        row = []
        for client in clients.values():
            client.get(path, HTTP_HOST="127.0.0.1")  # warm (session, admin group cache)
            with CaptureQueriesContext(connection) as queries:
                assert client.get(path, HTTP_HOST="127.0.0.1").status_code == 200
            row.append(len(queries))
        counts[case] = tuple(row)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--skip-setup", action="store_true")
    parser.add_argument(
        "--no-monthly", action="store_true", help="fill without monthly rollups (the baseline)"
    )
    args = parser.parse_args()

    create_database(DB)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if not args.skip_setup:
        populate(args.teams, monthly=not args.no_monthly)
    token = token_for("bench-admin")

    port = free_port()
    server = start_gunicorn(port)
    try:
        print(f"\n{'case':42} {'n':>4} {'p50 ms':>9} {'p95 ms':>9}")
        for case, path in CASES.items():
            n = args.requests if "year" not in case else max(10, args.requests // 2)
            times = timed(f"http://127.0.0.1:{port}{path}", token, n)
            print(f"{case:42} {n:>4} {pct(times, 50) * 1000:>9.0f} {pct(times, 95) * 1000:>9.0f}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    print(f"\n{'queries per request':42} {'admin':>9} {'lead (1 team)':>14}")
    for case, (admin, lead) in query_counts().items():
        print(f"{case:42} {admin:>9} {lead:>14}")


if __name__ == "__main__":
    main()
