"""Targeted syncs: a change to teams T plans only T's objects and the Queues of T's department
trees, read by label selector (``fairshare.io/team in (...)``), through the same planner and the
same single flight as a full sync — against the fake API server."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.models import Membership, Namespace, Team, TeamQuota
from scheduling.choices import SyncStatus
from scheduling.desired import build_cluster_spec, sync_scope
from scheduling.domain.render import object_key, render
from scheduling.sync import create_run, run_sync
from tests.base import GPU, make_cast

pytestmark = pytest.mark.django_db

MANAGED = "app.kubernetes.io/managed-by=fairshare"


@pytest.fixture
def cluster(kubeapi, settings, monkeypatch):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", lambda run_id: None)
    return kubeapi


@pytest.fixture
def world(cluster):
    """The cast (dept-x ▸ team-a, team-b) plus a top-level team ``solo`` in a tree of its own,
    all synced once."""
    cast = make_cast()
    solo = Team.objects.create(slug="solo", name="Solo", weight=1, tier=cast.tier)
    Namespace.objects.create(name="solo-ml", team=solo)
    TeamQuota.objects.create(team=solo, resource=GPU, guarantee=Decimal(5), limit=Decimal(10))
    assert sync(None).status == SyncStatus.SUCCEEDED
    cluster.reset_counts()
    return cast


def sync(teams):
    run = run_sync(create_run(teams=teams).pk)
    run.refresh_from_db()
    return run


def edit(cluster, kind, name, namespace=None, **spec):
    obj = cluster.get(kind, name, namespace)
    obj["spec"] = {**obj["spec"], **spec}
    cluster.put_object(obj)


def test_a_targeted_sync_plans_only_the_teams_objects_and_their_department_trees_queues(
    world, cluster
):
    TeamQuota.objects.filter(team=world.team_a, resource=GPU).update(limit=Decimal(36))
    # Out of scope, so left alone until the full sync: a hand edit in team-b's namespace and
    # in solo's Queue.
    edit(cluster, "ResourceQuota", "fairshare", "team-b-ml", hard={"requests.nvidia.com/gpu": "1"})
    edit(cluster, "Queue", "solo", weight=9)

    run = sync(["team-a"])

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert run.log.startswith("Targeted sync: teams team-a")
    seen = set(run.items.values_list("kind", "namespace", "name"))
    namespaced = {(k, ns) for k, ns, _ in seen if ns}
    assert {ns for _, ns in namespaced} == {"team-a-ml"}
    assert {n for k, _, n in seen if k == "Queue"} == {"dept-x", "team-a", "team-b"}
    assert not {k for k, _, _ in seen} & {"PriorityClass"}
    updated = set(run.items.filter(action="update").values_list("kind", "name"))
    assert updated == {("ResourceQuota", "fairshare"), ("Queue", "team-a")}
    assert (
        cluster.get("ResourceQuota", "fairshare", "team-a-ml")["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "36"
    )
    assert (
        cluster.get("ResourceQuota", "fairshare", "team-b-ml")["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "1"
    )
    assert cluster.get("Queue", "solo")["spec"]["weight"] == 9
    # Live state read by label selector; no PriorityClass LIST at all.
    selectors = dict(cluster.list_selectors)
    assert selectors["ResourceQuota"] == f"{MANAGED},fairshare.io/team in (team-a)"
    assert selectors["RoleBinding"] == f"{MANAGED},fairshare.io/team in (team-a)"
    assert selectors["Queue"] == f"{MANAGED},fairshare.io/team in (dept-x,team-a,team-b)"
    assert "PriorityClass" not in selectors

    # The full sync (the beat) is still the source of truth: it repairs the rest.
    full = sync(None)
    assert full.drift_count == 2
    assert cluster.get("Queue", "solo")["spec"]["weight"] == 1


def test_a_targeted_sync_prunes_within_its_scope_only(world, cluster):
    Membership.objects.filter(user=world.bob, team=world.team_a).delete()
    Membership.objects.filter(user=world.charlie, team=world.team_b).delete()

    run = sync(["team-a"])

    pruned = set(run.items.filter(action="prune").values_list("namespace", "name"))
    assert pruned == {("team-a-ml", "fairshare-member")}
    assert cluster.get("RoleBinding", "fairshare-member", "team-a-ml") is None
    assert cluster.get("RoleBinding", "fairshare-lead", "team-b-ml") is not None  # not in scope
    changed = set(run.items.exclude(action="unchanged").values_list("namespace", flat=True))
    assert changed == {"team-a-ml"}  # the prune, and bob out of the Volcano binding


def test_a_targeted_sync_of_a_deactivated_team_prunes_its_queue_and_objects(world, cluster):
    Team.objects.filter(pk=world.team_b.pk).update(active=False)

    run = sync(["team-b"])

    assert run.status == SyncStatus.SUCCEEDED, run.error
    assert cluster.get("Queue", "team-b") is None
    assert cluster.get("ResourceQuota", "fairshare", "team-b-ml") is None
    assert cluster.get("Namespace", "team-b-ml") is not None  # never pruned unless asked
    assert cluster.get("Queue", "team-a") is not None


def test_a_steady_targeted_sync_writes_nothing(world, cluster):
    run = sync(["team-a", "solo"])

    assert run.status == SyncStatus.SUCCEEDED
    assert run.unchanged_count == run.total > 0
    assert cluster.writes() == 0


@pytest.mark.parametrize(
    ("teams", "queues"),
    [
        (["team-a"], False),
        (["team-b", "solo"], False),
        (["dept-x"], False),
        (["gone"], False),
        ([], True),
        (["team-a"], True),
    ],
)
def test_every_object_a_targeted_render_gives_is_the_one_the_full_render_gives(
    world, teams, queues
):
    full = {object_key(m): m for m in render(build_cluster_spec())}
    scope = sync_scope(teams, queues=queues)
    within = None if queues else scope.trees
    targeted = [
        m
        for m in render(build_cluster_spec(within=within), namespaces_of=scope.teams)
        if scope.covers(m)
    ]

    expected = {key: m for key, m in full.items() if scope.covers(m)}
    assert {object_key(m): m for m in targeted} == expected
    if queues:  # every Queue
        assert {k for k in expected if k[0] == "Queue"} == {k for k in full if k[0] == "Queue"}


def test_a_queues_only_sync_plans_every_queue_and_prunes_nothing(world, cluster):
    run = run_sync(create_run(queues=True).pk)

    assert run.status == SyncStatus.SUCCEEDED
    assert set(run.items.values_list("kind", flat=True)) == {"Queue"}
    assert run.unchanged_count == run.total == 4  # dept-x, team-a, team-b, solo
    assert cluster.writes() == 0


def test_the_scope_of_a_team_is_its_whole_department_tree(world):
    assert sync_scope(["team-a"]).trees == {"dept-x", "team-a", "team-b"}
    assert sync_scope(["solo"]).trees == {"solo"}
    assert sync_scope(["gone"]).trees == {"gone"}  # a deleted team: its objects get pruned
