"""Issue 25 item 3: a team's cluster name is fixed when the team is created; renaming its slug
or display name changes URLs and pages only. Volcano fixes a PodGroup's queue at creation
(``pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go`` routes on CREATE only), so a
renamed Queue would strand the team's running and pending PodGroups."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from quotas.models import Team
from scheduling.choices import SyncStatus
from scheduling.desired import build_cluster_spec, sync_scope
from scheduling.sync import create_run, run_sync
from tests.base import make_cast

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(kubeapi, settings, monkeypatch):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    monkeypatch.setattr("scheduling.tasks.sync_cluster.delay", lambda run_id: None)
    return kubeapi


def sync(teams=None):
    run = run_sync(create_run(teams=teams).pk)
    run.refresh_from_db()
    return run


def podgroup(name: str, namespace: str, queue: str, phase: str = "Running") -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 1, "queue": queue},
        "status": {"phase": phase},
    }


def test_a_new_team_takes_its_slug_as_its_fixed_cluster_name():
    team = Team.objects.create(slug="vision", name="Vision")
    team.slug = "computer-vision"
    team.save()
    team.refresh_from_db()
    assert team.cluster_name == "vision"
    assert Team.objects.bulk_create([Team(slug="bulk", name="Bulk")])[0].cluster_name == "bulk"


def test_a_new_team_cannot_take_a_slug_that_is_another_teams_cluster_name():
    team = Team.objects.create(slug="vision", name="Vision")
    team.slug = "computer-vision"
    team.save()
    with pytest.raises(ValidationError) as caught:
        Team(slug="vision", name="Another").full_clean()
    assert "fixed cluster name of another team" in caught.value.message_dict["slug"][0]


def test_renaming_a_slug_while_podgroups_run_writes_nothing_to_the_cluster(cluster):
    cast = make_cast()
    assert sync().status == SyncStatus.SUCCEEDED
    cluster.put_object(podgroup("train", "team-a-ml", "team-a"))
    cluster.put_object(podgroup("waiting", "team-a-ml", "team-a", phase="Pending"))
    cluster.reset_counts()

    cast.team_a.slug = "team-alpha"
    cast.team_a.name = "Team Alpha"
    cast.team_a.save()

    for teams in (["team-alpha"], None):  # the targeted sync the change starts, then a full one
        run = sync(teams)
        assert run.status == SyncStatus.SUCCEEDED, run.error
        assert not run.items.exclude(action="unchanged").exists()
    assert cluster.writes() == 0
    queue = cluster.get("Queue", "team-a")
    assert queue is not None and queue["metadata"]["labels"]["fairshare.io/team"] == "team-a"
    assert cluster.get("Queue", "team-alpha") is None
    assert {pg["spec"]["queue"] for pg in cluster.objects("PodGroup", "team-a-ml")} == {"team-a"}
    namespace = cluster.get("Namespace", "team-a-ml")
    assert namespace["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a"


def test_the_spec_and_the_scope_name_teams_by_cluster_name():
    cast = make_cast()
    Team.objects.filter(pk=cast.dept.pk).update(slug="department-x")
    spec = build_cluster_spec()
    assert {t.slug for t in spec.teams} == {"dept-x", "team-a", "team-b"}
    assert {t.parent for t in spec.teams} == {None, "dept-x"}
    # A scope given by slug (the model's receivers) or by label (the watcher) is the same.
    assert sync_scope(["department-x"]) == sync_scope(["dept-x"])
    assert sync_scope(["department-x"]).trees == {"dept-x", "team-a", "team-b"}
