"""Issue 25 items 4 and 8: transitions end to end through the fake API server. Each is made
while the team has running and pending PodGroups; the cluster keeps every workload on a Queue
that exists and is a leaf while the transition waits (its state visible), and converges once
they finish."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.choices import TransitionKind, TransitionState
from quotas.exceptions import InvalidTransition, PermissionDenied
from quotas.models import AuditEvent, Namespace, Team, TeamQuota, Transition
from quotas.transitions import cancel_transition
from scheduling.choices import SyncStatus
from scheduling.sync import create_run, run_sync
from tests.base import GPU, make_cast

pytestmark = pytest.mark.django_db

ANNOTATION = "scheduling.volcano.sh/queue-name"


@pytest.fixture
def cluster(kubeapi, settings, monkeypatch):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", lambda *a, **k: None)
    monkeypatch.setattr("scheduling.sync.runs._enqueue", lambda run_id: None)
    return kubeapi


def sync_now():
    run = run_sync(create_run().pk)
    run.refresh_from_db()
    assert run.status == SyncStatus.SUCCEEDED, (
        run.error,
        list(run.items.filter(action="failed").values_list("kind", "name", "error")),
    )
    return run


def podgroup(name: str, namespace: str, queue: str, phase: str) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 1, "queue": queue},
        "status": {"phase": phase},
    }


def workloads(cluster, namespace: str, queue: str) -> None:
    cluster.put_object(podgroup("running", namespace, queue, "Running"))
    cluster.put_object(podgroup("pending", namespace, queue, "Pending"))


def finish(cluster, namespace: str) -> None:
    for pg in cluster.objects("PodGroup", namespace):
        pg["status"] = {"phase": "Completed"}
        cluster.put_object(pg)


def clean_up(cluster, namespace: str) -> None:
    """What Volcano's job controller (a finished vcjob's TTL) or the garbage collector does."""
    for pg in cluster.objects("PodGroup", namespace):
        cluster.store.remove("PodGroup", namespace, pg["metadata"]["name"])


def assert_nothing_stranded(cluster) -> None:
    assert cluster.stranded_podgroups() == []
    assert cluster.scheduler_blocked() is None


def assert_converged(cluster) -> None:
    """The next sync writes nothing, and nothing is stranded."""
    cluster.reset_counts()
    run = sync_now()
    assert not run.items.exclude(action="unchanged").exists()
    assert cluster.writes() == 0
    assert_nothing_stranded(cluster)


@pytest.fixture
def world(cluster):
    """dept-x ▸ team-a, team-b (the cast), plus a top-level leaf team ``research`` with a
    namespace, all synced."""
    cast = make_cast()
    research = Team.objects.create(slug="research", name="Research", tier=cast.tier)
    TeamQuota.objects.create(team=research, resource=GPU, guarantee=Decimal(5), limit=Decimal(20))
    Namespace.objects.create(name="research-ml", team=research)
    sync_now()
    cast.research = research
    return cast


def test_a_leaf_team_with_workloads_gets_its_first_child_only_once_they_finish(world, cluster):
    research = world.research
    workloads(cluster, "research-ml", "research")

    vision = Team.objects.create(slug="vision", name="Vision", parent=research, tier=world.tier)
    Namespace.objects.create(name="vision-ml", team=vision)

    transition = Transition.objects.get(team=vision)
    assert transition.kind == TransitionKind.FIRST_CHILD
    sync_now()
    transition.refresh_from_db()
    assert transition.state == TransitionState.WAITING
    assert transition.blocking == 2
    assert transition.waiting_for == (
        "waiting for 2 workloads in queue research to finish and be cleaned up before "
        "research can become a department with vision in it"
    )
    # Meanwhile the cluster is as before: research is a leaf, vision is not there.
    assert cluster.get("Queue", "vision") is None
    assert cluster.get("Queue", "research.own") is None
    assert_nothing_stranded(cluster)

    finish(cluster, "research-ml")
    sync_now()
    transition.refresh_from_db()
    # Finished PodGroups are still jobs of the scheduler's session (capacity.go checks them).
    assert (transition.state, transition.blocking) == (TransitionState.WAITING, 2)

    clean_up(cluster, "research-ml")
    sync_now()

    transition.refresh_from_db()
    assert transition.state == TransitionState.COMPLETED
    assert transition.completed_at is not None
    assert cluster.get("Queue", "vision")["spec"]["parent"] == "research"
    ns = cluster.get("Namespace", "research-ml")
    assert ns["metadata"]["annotations"][ANNOTATION] == "research.own"
    assert_converged(cluster)
    assert AuditEvent.objects.filter(object_type="quotas.Transition").count() == 2


def test_a_deactivated_team_keeps_its_queue_and_quota_until_workloads_finish_and_namespaces_go(
    world, cluster
):
    research = world.research
    workloads(cluster, "research-ml", "research")

    research.active = False
    research.save()
    sync_now()

    transition = Transition.objects.get(team=research)
    assert transition.kind == TransitionKind.DEACTIVATE
    assert transition.state == TransitionState.WAITING
    assert transition.blocking == 2
    assert "waiting for 2 workloads in queue research, research.own to finish" in (
        transition.waiting_for
    )
    assert "namespace to be released or moved to another team" in transition.waiting_for
    assert cluster.get("Queue", "research") is not None
    assert cluster.get("ResourceQuota", "fairshare", "research-ml") is not None
    assert_nothing_stranded(cluster)

    finish(cluster, "research-ml")
    sync_now()
    transition.refresh_from_db()
    assert transition.state == TransitionState.WAITING  # the namespace is still the team's
    assert transition.blocking == 0
    assert cluster.get("ResourceQuota", "fairshare", "research-ml") is not None

    Namespace.objects.filter(team=research).update(team=world.team_a)
    sync_now()
    transition.refresh_from_db()
    assert transition.state == TransitionState.COMPLETED
    assert cluster.get("Queue", "research") is None
    ns = cluster.get("Namespace", "research-ml")
    assert ns["metadata"]["annotations"][ANNOTATION] == "team-a"
    assert_converged(cluster)


def department_with_one_team_and_busy_own_leaf(world, cluster) -> None:
    """dept-x with its own namespace (routed to dept-x.own, running and pending PodGroups in
    it) and team-a as its single team, synced."""
    Namespace.objects.create(name="dept-x-ops", team=world.dept)
    TeamQuota.objects.filter(team=world.team_b).delete()
    Namespace.objects.filter(team=world.team_b).update(team=world.team_a)
    world.team_b.active = False
    world.team_b.save()
    sync_now()
    workloads(cluster, "dept-x-ops", "dept-x.own")


def test_moving_a_departments_last_team_waits_while_its_own_leaf_holds_workloads(world, cluster):
    department_with_one_team_and_busy_own_leaf(world, cluster)

    team_a = Team.objects.get(pk=world.team_a.pk)
    team_a.parent = None
    team_a.save()
    sync_now()

    transition = Transition.objects.get(team=team_a, state=TransitionState.WAITING)
    assert transition.kind == TransitionKind.MOVE
    assert transition.blocking == 2
    assert "queue dept-x.own" in transition.waiting_for
    assert cluster.get("Queue", "team-a")["spec"]["parent"] == "dept-x"
    assert cluster.get("Queue", "dept-x.own") is not None
    assert_nothing_stranded(cluster)

    finish(cluster, "dept-x-ops")
    sync_now()
    transition.refresh_from_db()
    assert transition.state == TransitionState.COMPLETED
    assert cluster.get("Queue", "team-a")["spec"].get("parent") in (None, "root")
    assert cluster.get("Queue", "dept-x.own") is None
    assert_converged(cluster)


def test_a_move_into_a_busy_leaf_team_waits_and_an_admin_can_cancel_it(world, cluster):
    workloads(cluster, "research-ml", "research")
    team_a = Team.objects.get(pk=world.team_a.pk)
    team_a.parent = world.research
    team_a.save()
    sync_now()
    transition = Transition.objects.get(team=team_a, state=TransitionState.WAITING)
    assert transition.kind == TransitionKind.FIRST_CHILD
    assert cluster.get("Queue", "team-a")["spec"]["parent"] == "dept-x"

    with pytest.raises(PermissionDenied):
        cancel_transition(transition.pk, actor=world.alice)
    cancel_transition(transition.pk, actor=world.root)

    transition.refresh_from_db()
    team_a.refresh_from_db()
    assert transition.state == TransitionState.CANCELLED
    assert team_a.parent_id == world.dept.pk
    with pytest.raises(InvalidTransition):
        cancel_transition(transition.pk, actor=world.root)
    sync_now()
    assert cluster.get("Queue", "team-a")["spec"]["parent"] == "dept-x"
    assert_nothing_stranded(cluster)


def test_changes_without_workloads_complete_in_the_same_run(world, cluster):
    vision = Team.objects.create(
        slug="vision", name="Vision", parent=world.research, tier=world.tier
    )
    run = sync_now()
    assert Transition.objects.get(team=vision).state == TransitionState.COMPLETED
    assert "Transitions completed" in run.log
    assert cluster.get("Queue", "vision")["spec"]["parent"] == "research"


def test_the_api_shows_what_waits_and_lets_an_admin_cancel_it(world, cluster):
    from rest_framework.test import APIClient

    workloads(cluster, "research-ml", "research")
    research = Team.objects.get(pk=world.research.pk)
    research.active = False
    research.save()
    sync_now()
    transition = Transition.objects.get(team=research)

    outsider = APIClient()
    outsider.force_authenticate(world.alice)  # team-a's lead: cannot see research
    assert outsider.get("/api/v1/transitions/").json()["results"] == []
    assert outsider.post(f"/api/v1/transitions/{transition.pk}/cancel/").status_code == 404

    admin = APIClient()
    admin.force_authenticate(world.root)
    [shown] = admin.get("/api/v1/transitions/?state=waiting").json()["results"]
    assert shown["team"] == "research"
    assert shown["team_cluster_name"] == "research"
    assert shown["kind"] == "deactivate"
    assert shown["blocking"] == 2
    assert shown["queues"] == ["research", "research.own"]
    assert shown["waiting_for"].startswith("waiting for 2 workloads in queue research")
    assert shown["since"]

    answer = admin.post(f"/api/v1/transitions/{transition.pk}/cancel/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == "cancelled"
    assert Team.objects.get(pk=research.pk).active is True
    again = admin.post(f"/api/v1/transitions/{transition.pk}/cancel/")
    assert again.status_code == 409
    assert "Only a waiting transition can be cancelled" in again.json()["errors"]["detail"][0]
    assert admin.get("/api/v1/teams/research/").json()["cluster_name"] == "research"


def test_a_waiting_transition_is_a_prometheus_metric(world, cluster):
    from portal.metrics import FairshareCollector

    workloads(cluster, "research-ml", "research")
    research = Team.objects.get(pk=world.research.pk)
    research.active = False
    research.save()
    sync_now()

    metrics = {m.name: m for m in FairshareCollector().collect()}
    [waiting] = metrics["fairshare_transition_waiting"].samples
    assert waiting.labels == {"team": "research", "kind": "deactivate"}
    assert waiting.value == 1
    [blocking] = metrics["fairshare_transition_blocking_workloads"].samples
    assert blocking.value == 2
    [age] = metrics["fairshare_transition_waiting_seconds"].samples
    assert age.value >= 0


def test_the_team_page_shows_what_waits_and_an_admin_cancels_it_there(world, cluster, client):
    from tests.base import PASSWORD

    workloads(cluster, "research-ml", "research")
    research = Team.objects.get(pk=world.research.pk)
    research.slug = "research-lab"  # a rename: the page moves, the cluster name stays
    research.active = False
    research.save()
    sync_now()
    transition = Transition.objects.get(team=research)

    client.login(username="root", password=PASSWORD)
    page = client.get("/teams/research-lab/").content.decode()
    assert "Waiting before the cluster changes" in page
    assert "waiting for 2 workloads in queue research, research.own to finish" in page
    assert "Name in the cluster: <code>research</code>" in page
    assert f"/teams/research-lab/transitions/{transition.pk}/cancel/" in page

    client.logout()
    client.login(username="alice", password=PASSWORD)
    url = f"/teams/research-lab/transitions/{transition.pk}/cancel/"
    assert client.post(url).status_code == 404  # alice cannot see research

    client.logout()
    client.login(username="root", password=PASSWORD)
    assert client.post(url).status_code == 302
    transition.refresh_from_db()
    assert transition.state == TransitionState.CANCELLED
    assert Team.objects.get(pk=research.pk).active is True
    assert (
        "Waiting before the cluster changes"
        not in client.get("/teams/research-lab/").content.decode()
    )


def test_the_advance_task_decides_from_the_latest_workload_collection(world, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.models import Workload
    from scheduling import tasks

    started = []
    monkeypatch.setattr(
        "scheduling.sync.start_sync", lambda **kwargs: started.append(kwargs["teams"])
    )
    vision = Team.objects.create(
        slug="vision", name="Vision", parent=world.research, tier=world.tier
    )
    now = timezone.now()
    for taken_at, phase in ((now - timedelta(minutes=1), "Running"), (now, "Running")):
        Workload.objects.create(
            taken_at=taken_at,
            team=world.research,
            namespace="research-ml",
            name="train",
            kind="PodGroup",
            queue="research",
            phase=phase,
        )

    assert tasks.advance_transitions() == {"completed": [], "waiting": 1}
    transition = Transition.objects.get(team=vision)
    assert (transition.state, transition.blocking) == (TransitionState.WAITING, 1)
    assert started == []

    Workload.objects.create(  # the next collection: the PodGroup is gone
        taken_at=now + timedelta(minutes=1),
        team=world.research,
        namespace="research-ml",
        name="other",
        kind="PodGroup",
        queue="team-a",
        phase="Running",
    )
    assert tasks.advance_transitions() == {"completed": ["research", "vision"], "waiting": 0}
    assert Transition.objects.get(team=vision).state == TransitionState.COMPLETED
    assert started == [["research", "vision"]]


def test_a_move_through_the_api_records_who_asked_and_syncs_both_departments(
    world, cluster, monkeypatch
):
    from django.test import TestCase
    from rest_framework.test import APIClient

    sent = []
    monkeypatch.setattr(
        "scheduling.tasks.sync_cluster.delay", lambda **kwargs: sent.append(kwargs.get("teams"))
    )
    monkeypatch.setattr("scheduling.tasks.compute_shares.si", lambda **kw: _Chain())
    TeamQuota.objects.filter(team=world.research).update(guarantee=30, limit=100)
    workloads(cluster, "research-ml", "research")
    admin = APIClient()
    admin.force_authenticate(world.root)
    with TestCase.captureOnCommitCallbacks(execute=True):
        answer = admin.patch("/api/v1/teams/team-a/", {"parent": "research"}, format="json")
    assert answer.status_code == 200, answer.content
    transition = Transition.objects.get(team=world.team_a, state=TransitionState.WAITING)
    assert transition.started_by == world.root
    assert sent == [["dept-x", "research", "team-a"]]


class _Chain:
    def __or__(self, other):
        return self

    def apply_async(self):
        return None


def test_tier_changes_while_workloads_run_strand_nothing_and_converge_in_one_run(world, cluster):
    """A team's new tier and a tier's new value, each made while the team has running and
    pending PodGroups. Neither waits: no Queue is renamed, removed or made a parent, so every
    PodGroup keeps a leaf queue; the team's Queue and Namespace carry the new tier at once, the
    PriorityClass is re-created (value and preemptionPolicy are immutable upstream) and the
    cluster converges in the same run."""
    from quotas.models import PriorityTier

    research = world.research
    workloads(cluster, "research-ml", "research")
    production = PriorityTier.objects.create(
        name="production", value=1000000, preemption_policy="PreemptLowerPriority"
    )
    sync_now()

    research.tier = production
    research.save()
    assert not Transition.objects.filter(team=research).exists()
    sync_now()
    queue = cluster.get("Queue", "research")
    assert queue["metadata"]["labels"]["fairshare.io/tier"] == "production"
    assert (
        cluster.get("Namespace", "research-ml")["metadata"]["labels"]["fairshare.io/tier"]
        == "production"
    )
    assert {pg["spec"]["queue"] for pg in cluster.objects("PodGroup", "research-ml")} == {
        "research"
    }
    assert_nothing_stranded(cluster)
    assert_converged(cluster)

    production.value = 900000
    production.save()
    uid = cluster.get("PriorityClass", "production")["metadata"]["uid"]
    sync_now()
    recreated = cluster.get("PriorityClass", "production")
    assert recreated["value"] == 900000
    assert recreated["metadata"]["uid"] != uid
    assert_nothing_stranded(cluster)
    assert_converged(cluster)


def test_deactivating_a_departments_last_team_waits_while_its_own_leaf_holds_workloads(
    world, cluster
):
    """The department would become a leaf again and ``dept-x.own`` would go: the PodGroups in
    it would name a queue that no longer exists. The deactivation waits for them too."""
    department_with_one_team_and_busy_own_leaf(world, cluster)
    Namespace.objects.filter(team=world.team_a).update(team=world.research)

    team_a = Team.objects.get(pk=world.team_a.pk)
    team_a.active = False
    team_a.save()
    sync_now()

    transition = Transition.objects.get(team=team_a, state=TransitionState.WAITING)
    assert transition.kind == TransitionKind.DEACTIVATE
    assert transition.blocking == 2
    assert "dept-x.own" in transition.waiting_for
    assert transition.waiting_for.endswith("and dept-x loses its last team")
    assert cluster.get("Queue", "dept-x.own") is not None
    assert cluster.get("Queue", "team-a") is not None
    assert_nothing_stranded(cluster)

    finish(cluster, "dept-x-ops")
    sync_now()
    transition.refresh_from_db()
    assert transition.state == TransitionState.COMPLETED
    assert cluster.get("Queue", "team-a") is None
    assert cluster.get("Queue", "dept-x.own") is None
    assert_converged(cluster)


def test_a_quota_change_must_also_hold_for_the_team_a_waiting_deactivation_still_renders(
    world, cluster
):
    """Found by the random-admin-changes state machine: a department with a namespace is
    deactivated (it waits, so the cluster still has it above its teams), then its GPU limit is
    set to 0. The database view (department gone) allowed it; the rendered view (department
    still there, its teams guaranteed 50 GPUs) did not, and every sync failed. The hierarchy
    rules now hold for both views: the change is refused with the reason."""
    from django.core.exceptions import ValidationError

    from quotas import direct
    from quotas.lines import LineInput

    Namespace.objects.create(name="dept-x-ops", team=world.dept)
    sync_now()
    workloads(cluster, "dept-x-ops", "dept-x.own")
    dept = Team.objects.get(pk=world.dept.pk)
    dept.active = False
    dept.save()
    assert Transition.objects.get(team=dept).state == TransitionState.WAITING

    with pytest.raises(ValidationError) as caught:
        direct.set_team_quotas(dept, [LineInput(GPU, "0", "0")], actor=world.root)
    assert "dept-x" in str(caught.value)
    sync_now()
    assert_nothing_stranded(cluster)
