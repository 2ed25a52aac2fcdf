"""Benchmark the cluster sync against the fake API server: first sync vs steady state.

Usage (a scratch PostgreSQL database whose name contains "bench"; the script migrates and
*flushes* it, and refuses any other database):

    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE fairshare_bench'
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairshare_bench .venv/bin/python bench/sync.py

or SQLite: ``DATABASE_URL=sqlite:////tmp/fairshare_bench.sqlite3 .venv/bin/python bench/sync.py``.
Options: ``--teams 200 --namespaces 2000 --repeat 3``.

It builds ``--teams`` teams (one in ten is a department holding nine of the others) with three
quota rows, a GPU limit policy and five members each, and ``--namespaces`` managed namespaces
spread evenly over them; starts the fake Kubernetes API server (tests/kubeapi) in this process;
then runs one first sync (everything is created) and ``--repeat`` steady-state syncs, printing
the wall time of each and the API requests by verb and kind. Target: steady state = one LIST per
managed kind (plus pagination pages, 500 items per page) and zero writes, in under 5 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
os.environ.setdefault("FAIRSHARE_LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402

from kube.client import build_api_client  # noqa: E402
from quotas.models import (  # noqa: E402
    LimitPolicy,
    Membership,
    Namespace,
    PriorityTier,
    Team,
    TeamQuota,
)
from scheduling.sync import create_run, run_sync  # noqa: E402
from tests.kubeapi.server import FakeKubeApi  # noqa: E402

GPU = "nvidia.com/gpu"
ROLES = ("lead", "member", "member", "member", "viewer")


def fresh_database() -> None:
    name = str(settings.DATABASES["default"]["NAME"])
    if "bench" not in name:
        sys.exit(f"refusing to flush database {name!r}: its name must contain 'bench'")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)


def populate(teams: int, namespaces: int) -> None:
    production = PriorityTier.objects.create(
        name="production", value=1000000, preemption_policy="PreemptLowerPriority"
    )
    experiment = PriorityTier.objects.create(name="experiment", value=100000)
    departments = max(1, teams // 10)
    rows = [
        Team(
            slug=f"team-{i:04d}",
            name=f"Team {i}",
            weight=1 + i % 8,
            tier=production if i % 3 == 0 else experiment,
        )
        for i in range(teams)
    ]
    Team.objects.bulk_create(rows)
    by_slug = {t.slug: t for t in Team.objects.all()}
    ordered = [by_slug[f"team-{i:04d}"] for i in range(teams)]
    for i, team in enumerate(ordered[departments:]):
        team.parent = ordered[i % departments]
    Team.objects.bulk_update(ordered[departments:], ["parent"])
    quotas = []
    for i, team in enumerate(ordered):
        # A department's limits hold its nine teams' guarantees (the hierarchy rules).
        scale = 10 if i < departments else 1
        quotas += [
            TeamQuota(team=team, resource=GPU, guarantee=Decimal(4), limit=Decimal(16 * scale)),
            TeamQuota(team=team, resource="cpu", guarantee=Decimal(32), limit=Decimal(256 * scale)),
            TeamQuota(
                team=team, resource="memory", guarantee=Decimal(0), limit=Decimal(2**40 * scale)
            ),
        ]
    TeamQuota.objects.bulk_create(quotas)
    LimitPolicy.objects.bulk_create(
        [LimitPolicy(team=t, resource=GPU, max_per_container=Decimal(8)) for t in ordered]
    )
    User.objects.bulk_create([User(username=f"user-{i:05d}") for i in range(teams * len(ROLES))])
    users = list(User.objects.order_by("username"))
    Membership.objects.bulk_create(
        [
            Membership(user=users[i * len(ROLES) + j], team=team, role=role)
            for i, team in enumerate(ordered)
            for j, role in enumerate(ROLES)
        ]
    )
    Namespace.objects.bulk_create(
        [
            Namespace(name=f"ns-{n:05d}", team=ordered[n % teams], share=1 + n % 3)
            for n in range(namespaces)
        ]
    )


def timed_sync(api_client, server: FakeKubeApi) -> tuple[float, Counter, object]:
    server.reset_counts()
    run = create_run(trigger="bench")
    started = time.perf_counter()
    run = run_sync(run.pk, api_client=api_client)
    elapsed = time.perf_counter() - started
    return elapsed, Counter(server.counts), run


def show(title: str, elapsed: float, counts: Counter, run) -> None:
    print(
        f"\n{title}: {elapsed:.2f} s  ({run.status}; {run.total} objects: "
        f"{run.created_count} created, {run.updated_count} updated, "
        f"{run.unchanged_count} unchanged, {run.pruned_count} pruned, {run.failed_count} failed)"
    )
    for (verb, kind), n in sorted(counts.items()):
        print(f"  {verb:<6} {kind:<14} {n:>6}")
    writes = sum(n for (verb, _), n in counts.items() if verb not in ("get", "list"))
    print(f"  requests: {sum(counts.values())}, writes: {writes}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    print(
        f"database: {settings.DATABASES['default']['ENGINE']} "
        f"{settings.DATABASES['default']['NAME']}"
    )
    fresh_database()
    started = time.perf_counter()
    populate(args.teams, args.namespaces)
    print(
        f"populated {args.teams} teams, {args.namespaces} namespaces in "
        f"{time.perf_counter() - started:.2f} s"
    )

    server = FakeKubeApi().start()
    server.reset()
    api_client = build_api_client("kubeconfig", kubeconfig=server.kubeconfig_path, timeout=60)
    try:
        elapsed, counts, run = timed_sync(api_client, server)
        show("first sync", elapsed, counts, run)
        steady = []
        for i in range(args.repeat):
            elapsed, counts, run = timed_sync(api_client, server)
            steady.append(elapsed)
            show(f"steady-state sync {i + 1}", elapsed, counts, run)
        print(
            f"\nsteady state: best {min(steady):.2f} s, worst {max(steady):.2f} s "
            f"(target < 5 s, zero writes)"
        )
    finally:
        api_client.close()
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
