"""Workload records across collections, and how long workloads waited per team and week."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from monitoring.domain.aggregate import ClusterUsage
from monitoring.domain.workloads import Workload as Seen
from monitoring.models import Workload, WorkloadRecord
from monitoring.workloads import prune_records, store_workloads, team_waits
from tests.base import GPU

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def seen(name, *, waiting, running=0, ns="team-a-ml", kind="PyTorchJob", created=None, gpus=8):
    return Seen(
        namespace=ns,
        name=name,
        kind=kind,
        queue="team-a",
        priority_class="",
        gang_size=1,
        pods=1,
        running=running,
        requested={GPU: Decimal(gpus)},
        phase="Pending" if waiting else "Running",
        created=(created or NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        waiting=waiting,
        waiting_for={GPU: Decimal(gpus)} if waiting else {},
    )


def collect(now, *workloads):
    usage = ClusterUsage(
        capacity={},
        flavors={},
        namespaces={},
        teams={},
        flavor_allocated={},
        excluded_nodes=(),
        pod_counts={},
        workloads=tuple(workloads),
    )
    ids = {"team-a-ml": _team_ids["team-a-ml"], "team-b-ml": _team_ids["team-b-ml"]}
    return store_workloads(usage, now=now, team_ids=ids)


_team_ids: dict[str, int] = {}


@pytest.fixture(autouse=True)
def team_ids(cast):
    _team_ids.update({"team-a-ml": cast.team_a.pk, "team-b-ml": cast.team_b.pk})


def record(name):
    return WorkloadRecord.objects.get(name=name)


# ---------------------------------------------------------------- records


def test_a_record_follows_a_workload_from_waiting_to_finished(cast):
    created = NOW - timedelta(minutes=30)
    collect(NOW, seen("train", waiting=True, created=created))
    collect(NOW + MINUTE, seen("train", waiting=True, created=created))
    collect(NOW + 2 * MINUTE, seen("train", waiting=False, running=1, created=created))
    collect(NOW + 3 * MINUTE, seen("train", waiting=False, running=1, created=created))

    r = record("train")
    assert (r.team, r.kind, r.gpus, r.created) == (cast.team_a, "PyTorchJob", 8, created)
    assert (r.first_seen, r.first_waiting, r.started, r.last_seen, r.finished) == (
        NOW,
        NOW,
        NOW + 2 * MINUTE,
        NOW + 3 * MINUTE,
        None,
    )
    assert r.waited_seconds == 32 * 60  # from its creation to the first collection it ran in

    collect(NOW + 4 * MINUTE, seen("other", waiting=True))

    r.refresh_from_db()
    assert r.finished == NOW + 3 * MINUTE  # the last collection that saw it
    assert r.run_seconds == 60


def test_storing_a_collection_twice_changes_nothing(cast):
    collect(NOW, seen("train", waiting=True))
    collect(NOW + MINUTE, seen("train", waiting=False, running=1))
    before = list(WorkloadRecord.objects.values())

    collect(NOW + MINUTE, seen("train", waiting=False, running=1))

    assert list(WorkloadRecord.objects.values()) == before


def test_a_collection_without_workloads_closes_nothing(cast):
    collect(NOW, seen("train", waiting=False, running=1))

    collect(NOW + MINUTE)  # e.g. the demo's history replay: no workloads grouped

    assert record("train").finished is None


def test_a_workload_running_when_first_seen_has_no_known_wait(cast):
    collect(NOW, seen("old", waiting=False, running=1, created=NOW - timedelta(days=3)))
    collect(
        NOW + MINUTE,
        seen("old", waiting=False, running=1, created=NOW - timedelta(days=3)),
        # Created after the previous collection and already running: it never waited long
        # enough for a collection to see it.
        seen("quick", waiting=False, running=1, created=NOW + timedelta(seconds=20)),
    )

    assert record("old").started == NOW
    assert record("old").waited_seconds is None
    assert record("quick").waited_seconds == 0


def test_a_workload_seen_again_after_it_finished_is_a_new_record(cast):
    collect(NOW, seen("train", waiting=False, running=1))
    collect(NOW + MINUTE, seen("other", waiting=False, running=1))
    collect(NOW + 2 * MINUTE, seen("train", waiting=True))

    runs = WorkloadRecord.objects.filter(name="train").order_by("first_seen")
    assert [(r.first_seen, r.finished) for r in runs] == [(NOW, NOW), (NOW + 2 * MINUTE, None)]


def test_records_cost_the_same_queries_for_few_or_many_workloads(cast):
    def queries(n, now):
        batch = [seen(f"w{i}", waiting=i % 2 == 0, running=i % 2) for i in range(n)]
        collect(now - MINUTE, *batch)
        moved = [seen(f"w{i}", waiting=False, running=1) for i in range(1, n)]
        with CaptureQueriesContext(connection) as ctx:
            collect(now, *moved)
        return len(ctx.captured_queries)

    few = queries(3, NOW)
    WorkloadRecord.objects.all().delete()
    Workload.objects.all().delete()
    many = queries(40, NOW + timedelta(hours=1))
    assert few == many


def test_old_records_are_pruned(cast, settings):
    settings.FAIRSHARE_WORKLOAD_RECORD_DAYS = 10
    collect(NOW - timedelta(days=11), seen("ancient", waiting=False, running=1))
    collect(NOW - timedelta(days=9), seen("recent", waiting=False, running=1))

    assert prune_records(now=NOW) == 1
    assert list(WorkloadRecord.objects.values_list("name", flat=True)) == ["recent"]


# ---------------------------------------------------------------- waits per week


def _started(team, name, started, waited):
    WorkloadRecord.objects.create(
        team=team,
        namespace=f"{team.slug}-ml",
        kind="Job",
        name=name,
        first_seen=started - timedelta(seconds=waited),
        last_seen=started,
        started=started,
        waited_seconds=waited,
    )


@pytest.fixture
def waits(cast):
    # Monday 2026-11-30 and the week before
    for i, waited in enumerate((60, 120, 3600)):
        _started(cast.team_a, f"a{i}", NOW - timedelta(hours=i), waited)
    _started(cast.team_a, "a-last-week", NOW - timedelta(days=3), 600)
    _started(cast.team_b, "b0", NOW, 30)
    WorkloadRecord.objects.create(  # running when first seen: its wait is not known
        team=cast.team_a,
        namespace="team-a-ml",
        kind="Job",
        name="unknown",
        first_seen=NOW,
        last_seen=NOW,
        started=NOW,
    )


def test_team_waits_counts_per_week_of_the_start(cast, waits):
    rows = team_waits([cast.team_a], now=NOW)

    assert [(r.week.isoformat(), r.started, r.median_seconds, r.p90_seconds) for r in rows] == [
        ("2026-11-30", 3, 120, 3600),
        ("2026-11-23", 1, 600, 600),
    ]
    assert team_waits([cast.team_a], now=NOW, weeks=1)[0].longest_seconds == 3600


@pytest.fixture(autouse=True)
def _clock(monkeypatch):
    # The API reads the time; the weeks are the fixture's.
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)


def _api(user, **params):
    client = Client()
    client.force_login(user)
    return client.get("/api/v1/workload-waits/", params)


def test_a_lead_sees_the_waits_of_their_own_teams_only(cast, waits):
    body = _api(cast.alice).json()
    assert {row["team"] for row in body["results"]} == {"team-a"}
    assert body["results"][0] == {
        "team": "team-a",
        "week": "2026-11-30",
        "started": 3,
        "median_wait_seconds": 120,
        "p90_wait_seconds": 3600,
        "longest_wait_seconds": 3600,
    }
    assert {row["team"] for row in _api(cast.charlie).json()["results"]} == {"team-b"}
    assert _api(cast.charlie, team="team-a").status_code == 404
    assert _api(cast.charlie, team="no-such-team").status_code == 404


def test_site_admins_see_every_teams_waits(cast, waits):
    body = _api(cast.root, weeks="1").json()
    assert body["weeks"] == 1
    assert [(r["team"], r["week"]) for r in body["results"]] == [
        ("team-a", "2026-11-30"),
        ("team-b", "2026-11-30"),
    ]


@pytest.mark.parametrize("weeks", ["0", "53", "x", "-1"])
def test_weeks_must_be_sane(cast, weeks):
    assert _api(cast.root, weeks=weeks).status_code == 400


def test_anonymous_callers_get_nothing(cast, waits):
    assert Client().get("/api/v1/workload-waits/").status_code in (401, 403)
