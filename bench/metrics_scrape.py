"""Time a /metrics scrape and a team page's GPU alerts with many GPUs reporting; count series.

Usage::

    .venv/bin/python bench/metrics_scrape.py [--gpus 1000] [--teams 100] [--history 30]
        [--repeat 20] [--skip-setup]

1. Creates the scratch database ``fairshare_bench_metrics`` (``psql -h 127.0.0.1 -U postgres -c
   'CREATE DATABASE fairshare_bench_metrics'``) if missing and migrates it. Unless
   ``--skip-setup``, fills it (repeatable): ``--teams`` teams with one namespace and one lead
   each, ``--gpus`` GPUs on nodes of 8, each used by a pod of one team, sampled every 15 s (the
   agent's default) for the last ``--history`` minutes, with utilization, memory and
   temperature spread so that some GPUs trip each alert.
2. Times ``--repeat`` scrapes in-process (``generate_latest(build_registry())``, what the
   /metrics view returns, after one warm-up) and prints p50/p95 in ms, the SQL queries per
   scrape, the body size and the series per metric family.
3. Times ``current_gpu_alerts`` (the team page's GPU alerts section) for one team, the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import create_database, pct  # noqa: E402

DB = "fairshare_bench_metrics"
os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DB}")
os.environ.setdefault("SECRET_KEY", "bench-not-secret")
os.environ.setdefault("FAIRSHARE_CLUSTER", "disabled")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def populate(gpus: int, teams: int, history_minutes: int, now) -> None:
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import transaction

    from monitoring.models import GpuSample
    from quotas.models import Membership, Namespace, Team

    with transaction.atomic():
        GpuSample.objects.all().delete()
        Membership.objects.all().delete()
        Namespace.objects.all().delete()
        Team.objects.all().delete()
        User.objects.filter(username__startswith="bench-metrics-").delete()
        team_rows = Team.objects.bulk_create(
            Team(slug=f"team-{i:04d}", name=f"Team {i}") for i in range(teams)
        )
        Namespace.objects.bulk_create(Namespace(name=f"{t.slug}-ml", team=t) for t in team_rows)
        users = User.objects.bulk_create(
            User(username=f"bench-metrics-{i}", email=f"lead{i}@example.org") for i in range(teams)
        )
        Membership.objects.bulk_create(
            Membership(user=u, team=t, role="lead") for u, t in zip(users, team_rows, strict=True)
        )
        steps = history_minutes * 4
        batch = []
        for g in range(gpus):
            team = team_rows[g % teams]
            util = (g * 37) % 100
            temp = 50 + (g * 13) % 40
            mem = 0.5 + ((g * 7) % 50) / 100
            for s in range(steps + 1):
                batch.append(
                    GpuSample(
                        taken_at=now - timedelta(seconds=15 * (steps - s)),
                        node=f"gpu-node-{g // 8:04d}",
                        uuid=f"GPU-{g:06d}",
                        index=g % 8,
                        model="NVIDIA H100 80GB HBM3",
                        util_gpu=util,
                        mem_used=int(80 * 2**30 * mem),
                        mem_total=80 * 2**30,
                        temp_c=temp,
                        namespace=f"{team.slug}-ml",
                        pod=f"train-{g}",
                        team=team,
                    )
                )
                if len(batch) >= 20_000:
                    GpuSample.objects.bulk_create(batch)
                    batch = []
        GpuSample.objects.bulk_create(batch)


def timed(fn, repeat: int) -> tuple[list[float], object]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--history", type=int, default=30, help="minutes of samples")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-setup", action="store_true")
    args = parser.parse_args()

    create_database(DB)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from monitoring.gpu_alerts import current_gpu_alerts
    from monitoring.models import GpuSample
    from portal.metrics import build_registry
    from quotas.models import Team

    call_command("migrate", verbosity=0)
    now = timezone.now()
    if not args.skip_setup:
        start = time.perf_counter()
        populate(args.gpus, args.teams, args.history, now)
        print(f"setup: {time.perf_counter() - start:.1f} s")
    newest = GpuSample.objects.order_by("-taken_at").values_list("taken_at", flat=True).first()
    print(f"{GpuSample.objects.count():,} GPU samples, {args.gpus:,} GPUs, {args.teams} teams")

    def scrape():
        return generate_latest(build_registry(now=lambda: newest))

    times, body = timed(scrape, args.repeat)
    with CaptureQueriesContext(connection) as queries:
        scrape()
    series = Counter(
        family.name
        for family in text_string_to_metric_families(body.decode())
        for _ in family.samples
    )
    print(
        f"/metrics: p50 {pct(times, 50):.0f} ms, p95 {pct(times, 95):.0f} ms, "
        f"{len(queries.captured_queries)} queries, {len(body) / 1024:.0f} KiB"
    )
    for name, count in sorted(series.items()):
        if name.startswith(("fairshare_gpu", "fairshare_team_info", "fairshare_namespace_info")):
            print(f"  {name}: {count:,} series")

    team = Team.objects.order_by("slug").first()
    times, alerts = timed(lambda: current_gpu_alerts(team=team, now=newest), args.repeat)
    print(
        f"team page GPU alerts ({team.slug}, {args.gpus // args.teams} GPUs): "
        f"p50 {pct(times, 50):.1f} ms, p95 {pct(times, 95):.1f} ms, {len(alerts)} alerts"
    )


if __name__ == "__main__":
    main()
