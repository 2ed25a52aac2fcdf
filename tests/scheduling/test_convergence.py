"""Convergence against a server that defaults and admits like upstream (the fake API server with
Kubernetes defaulting and Volcano's webhooks and queue controller): one sync brings the cluster
to the desired state, the next one writes nothing — for the demo, and after random sequences of
admin changes made through the entry points (services, rebalance, the API's serializers).

Also checked after every sync: no container gets a GPU it did not ask for, every managed
namespace routes to a leaf queue, and a workload created in a team namespace lands in the
team's Queue.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from quotas.api.serializers import TeamSerializer
from quotas.decisions import approve_request, submit_request
from quotas.direct import set_team_quota
from quotas.exceptions import DomainError as QuotaDomainError
from quotas.lines import LineInput
from quotas.models import Namespace, Team
from quotas.rebalance import rebalance
from scheduling import services
from scheduling.choices import SyncStatus
from scheduling.domain.types import OVERCOMMITTABLE_RESOURCES
from scheduling.sync import create_run, run_sync
from tests.base import GPU, make_cast
from tests.kubeapi import volcano

pytestmark = pytest.mark.django_db

ANNOTATION = "scheduling.volcano.sh/queue-name"


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


def sync_now():
    run = run_sync(create_run().pk)
    run.refresh_from_db()
    return run


def converge_in_one_sync(cluster) -> None:
    """One sync succeeds with every change applied; the next one writes nothing."""
    first = sync_now()
    assert first.status == SyncStatus.SUCCEEDED, (first.error, list(failures(first)))
    assert first.failed_count == 0
    before = cluster.writes()
    second = sync_now()
    assert second.status == SyncStatus.SUCCEEDED, second.error
    assert cluster.writes() == before, list(changes(second))
    assert second.created_count == second.updated_count == second.pruned_count == 0
    check_cluster(cluster)


def failures(run):
    return run.items.filter(action="failed").values_list("kind", "name", "error")


def changes(run):
    return run.items.exclude(action="unchanged").values_list("kind", "name", "diff")


def check_cluster(cluster) -> None:
    """What must hold on the cluster after any sync."""
    queues = {q["metadata"]["name"]: q for q in cluster.objects("Queue")}
    for ns in cluster.objects("Namespace"):
        labels = ns["metadata"].get("labels") or {}
        if labels.get("app.kubernetes.io/managed-by") != "fairshare":
            continue
        target = (ns["metadata"].get("annotations") or {}).get(ANNOTATION)
        assert target in queues, (ns["metadata"]["name"], target)
        assert not volcano.children_of(target, queues), f"{target} is not a leaf"
    for lr in cluster.objects("LimitRange"):
        for item in lr["spec"]["limits"]:
            for resource, amount in (item.get("default") or {}).items():
                if resource not in OVERCOMMITTABLE_RESOURCES:
                    # as stored, after SetDefaults_LimitRangeItem: no device by default
                    assert parse_quantity(amount) == 0, (lr["metadata"], item)
    # Every stored Queue passes Volcano's rules as they stand (as if re-applied unchanged).
    for name, queue in queues.items():
        others = {n: q for n, q in queues.items()}
        volcano.validate_queue(queue, None, {n: q for n, q in others.items() if n != name})


# --------------------------------------------------------------------------- the demo


def test_the_demo_converges_in_one_sync_then_writes_nothing(cluster):
    call_command("seed_demo", "--quiet")
    services.compute_shares(trigger="test")

    converge_in_one_sync(cluster)

    queues = {q["metadata"]["name"]: q for q in cluster.objects("Queue")}
    assert {"ai-research", "ai-production", "research-team", "cv-team"} <= set(queues)
    # The controller's parent: root and the CRD's dequeueStrategy are there, and not drift.
    assert queues["ai-research"]["spec"]["parent"] == "root"
    assert queues["ai-research"]["spec"]["dequeueStrategy"] == "traverse"
    # Department guarantee derived from its teams (32 + 48 + 16 GPUs = its own 96).
    assert queues["ai-research"]["spec"]["guarantee"]["resource"][GPU] == "96"


def test_a_workload_in_a_team_namespace_lands_in_the_team_queue(cluster):
    call_command("seed_demo", "--quiet")
    converge_in_one_sync(cluster)
    custom = CustomObjectsApi(cluster.api_client())
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "llm-training-pg"},
        "spec": {"minMember": 4},
    }
    custom.create_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "research-ml", "podgroups", podgroup
    )
    stored = cluster.get("PodGroup", "llm-training-pg", "research-ml")
    assert stored["spec"]["queue"] == "research-team"

    # A Volcano Job may name its team's queue (a leaf), not the department's.
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "queue": "ai-research",
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "train", "image": "trainer:1"}],
                        }
                    },
                }
            ],
        },
    }
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "research-ml", "jobs", job
        )
    assert exc.value.status == 400, exc.value.body
    assert "can only submit job to leaf queue" in exc.value.body
    job["spec"]["queue"] = "research-team"
    custom.create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", "research-ml", "jobs", job
    )


def test_a_departments_own_namespace_routes_to_its_own_leaf_queue(cluster):
    call_command("seed_demo", "--quiet")
    ai = Team.objects.get(slug="ai-research")
    Namespace.objects.create(name="ai-research-shared", team=ai)

    converge_in_one_sync(cluster)

    ns = cluster.get("Namespace", "ai-research-shared")
    assert ns["metadata"]["annotations"][ANNOTATION] == "ai-research.own"
    leaf = cluster.get("Queue", "ai-research.own")
    assert leaf["spec"]["parent"] == "ai-research"
    # The department's own 96 GPUs are all taken by its teams: nothing left to guarantee.
    assert GPU not in (leaf["spec"].get("guarantee") or {}).get("resource", {})
    assert leaf["spec"]["capability"][GPU] == "208"


def test_a_sibling_rebalance_lands_in_one_sync(cluster):
    call_command("seed_demo", "--quiet")
    converge_in_one_sync(cluster)
    admin = User.objects.get(username="admin")
    # Move 16 GPUs between siblings: speech-team's guarantee must go down before
    # research-team's goes up, or the department's derived guarantee would not cover them.
    rebalance(
        {"speech-team": {"guarantee": {GPU: "0"}}, "research-team": {"guarantee": {GPU: "48"}}},
        actor=admin,
    )

    converge_in_one_sync(cluster)
    assert cluster.get("Queue", "research-team")["spec"]["guarantee"]["resource"][GPU] == "48"


# --------------------------------------------------------------------------- random admin changes

TEAMS = ("dept-x", "team-a", "team-b", "team-c")
AMOUNT = st.integers(min_value=0, max_value=40)


class AdminChanges(RuleBasedStateMachine):
    """Random admin changes through the entry points; after each: converge in one sync."""

    cluster = None  # set by the test

    @initialize()
    def start(self):
        self.savepoint = transaction.savepoint()
        self.cluster.reset()
        self.cast = make_cast()
        Team.objects.create(slug="team-c", name="Team C", parent=self.cast.dept)
        Namespace.objects.create(name="team-c-ml", team=Team.objects.get(slug="team-c"))
        self.refused = 0
        converge_in_one_sync(self.cluster)

    def teardown(self):
        if getattr(self, "savepoint", None) is not None:
            transaction.savepoint_rollback(self.savepoint)

    def _attempt(self, change) -> None:
        try:
            with transaction.atomic():
                change()
        except (ValidationError, QuotaDomainError):
            self.refused += 1

    @rule(
        team=st.sampled_from(TEAMS),
        resource=st.sampled_from([GPU, "cpu"]),
        guarantee=AMOUNT,
        extra=st.one_of(st.none(), AMOUNT),
    )
    def set_quota(self, team, resource, guarantee, extra):
        limit = None if extra is None else guarantee + extra
        self._attempt(
            lambda: set_team_quota(
                Team.objects.get(slug=team),
                resource,
                guarantee=str(guarantee),
                limit=None if limit is None else str(limit),
                actor=self.cast.root,
            )
        )

    @rule(moves=st.dictionaries(st.sampled_from(TEAMS[1:]), AMOUNT, min_size=2, max_size=3))
    def rebalance_guarantees(self, moves):
        self._attempt(
            lambda: rebalance(
                {slug: {"guarantee": {GPU: str(g)}} for slug, g in moves.items()},
                actor=self.cast.root,
            )
        )

    @rule(team=st.sampled_from(TEAMS[1:]), guarantee=AMOUNT, extra=AMOUNT, adjust=st.booleans())
    def approve(self, team, guarantee, extra, adjust):
        def change():
            target = Team.objects.get(slug=team)
            request = submit_request(
                team=target,
                requester=self.cast.root,
                lines=[LineInput(GPU, str(guarantee), str(guarantee + extra + 1))],
                justification="random",
            )
            adjustments = {GPU: (str(guarantee), str(guarantee + extra))} if adjust else None
            approve_request(request.pk, approver=self.cast.root, adjustments=adjustments)

        self._attempt(change)

    @rule(team=st.sampled_from(TEAMS[1:]), parent=st.sampled_from([None, "dept-x", "team-c"]))
    def move(self, team, parent):
        if parent == team:
            return

        def change():
            target = Team.objects.get(slug=team)
            serializer = TeamSerializer(
                target, data={"parent": parent}, partial=True, context={"request": None}
            )
            if not serializer.is_valid():
                raise ValidationError(serializer.errors)
            if parent and Team.objects.get(slug=parent).parent_id == target.pk:
                raise ValidationError("cycle")
            serializer.save()

        self._attempt(change)

    @rule(team=st.sampled_from(TEAMS))
    def toggle(self, team):
        def change():
            target = Team.objects.get(slug=team)
            serializer = TeamSerializer(
                target, data={"active": not target.active}, partial=True, context={"request": None}
            )
            if not serializer.is_valid():
                raise ValidationError(serializer.errors)
            serializer.save()

        self._attempt(change)

    @rule(team=st.sampled_from(TEAMS))
    def add_namespace(self, team):
        n = Namespace.objects.count()
        Namespace.objects.create(name=f"{team}-extra{n}", team=Team.objects.get(slug=team))

    @rule()
    def recompute_shares(self):
        services.compute_shares(trigger="test")

    @invariant()
    def converges(self):
        if getattr(self, "cast", None) is not None:
            converge_in_one_sync(self.cluster)


def test_random_admin_changes_always_converge_in_one_sync(cluster):
    AdminChanges.cluster = cluster
    run_state_machine_as_test(
        AdminChanges,
        settings=settings(
            max_examples=15,
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


# A sequence the state machine found (kept as a plain test).


def test_a_department_moving_to_the_top_with_its_team_converges(cluster):
    AdminChanges.cluster = cluster
    state = AdminChanges()
    try:
        state.start()
        state.rebalance_guarantees(moves={"team-a": 0, "team-b": 25})
        state.converges()
        state.rebalance_guarantees(moves={"team-a": 0, "team-b": 0})
        state.converges()
        state.move(parent=None, team="team-a")
        state.converges()
        state.rebalance_guarantees(moves={"team-a": 2, "team-b": 1})
        state.converges()
        state.move(parent="team-c", team="team-b")
        state.converges()
        state.move(parent=None, team="team-c")
        state.converges()
    finally:
        state.teardown()
