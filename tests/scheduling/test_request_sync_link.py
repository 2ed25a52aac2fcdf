"""Each approved request links to the sync run that applied it, and the run lists the requests
it applied (``SyncRun.quota_requests``): set where an approval (or a grant's activation)
starts the sync, carried over when a run is merged into another, shown to each viewer only
for the teams they may see."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from celery.canvas import _chain
from django.urls import reverse
from django.utils import timezone

from quotas import decisions, direct, grants
from quotas.lines import LineInput
from scheduling import tasks
from scheduling.choices import SyncStatus
from scheduling.models import SyncRun
from scheduling.sync import create_run, run_sync
from tests.base import GPU

pytestmark = pytest.mark.django_db


def submit(cast, team=None, **kwargs):
    return decisions.submit_request(
        team=team or cast.team_a,
        requester=cast.alice if team is None else cast.charlie,
        lines=[LineInput(GPU, "30", "50")],
        justification="Sweep.",
        **kwargs,
    )


@pytest.fixture
def syncs_started(monkeypatch):
    """The quota_changed receiver's messages: a sync task started with ``quota_requests``
    creates its run at once (what a worker would do); runs are not executed."""
    calls: list[dict] = []

    def delay(**kwargs):
        calls.append(kwargs)
        if "run_id" not in kwargs:
            tasks.sync_cluster.apply(kwargs=kwargs)

    monkeypatch.setattr(tasks.sync_cluster, "delay", delay)
    with mock.patch.object(_chain, "apply_async", autospec=True):
        yield calls


def test_an_approval_records_the_request_on_the_sync_that_applies_it(
    cast, kubeapi, settings, syncs_started, django_capture_on_commit_callbacks
):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    req = submit(cast)
    with django_capture_on_commit_callbacks(execute=True):
        decisions.approve_request(req.pk, approver=cast.root)

    started = [c for c in syncs_started if "run_id" not in c]
    assert started == [
        {"trigger": "quota-change:approve", "teams": ["team-a"], "quota_requests": [req.pk]}
    ]
    run = SyncRun.objects.get()
    assert list(run.quota_requests.all()) == [req]
    assert run.scope == {"teams": ["team-a"]}
    # And that run is the one that puts the approved amounts into the cluster.
    assert run_sync(run.pk).status == SyncStatus.SUCCEEDED
    quota = kubeapi.get("ResourceQuota", "fairshare", "team-a-ml")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "50"  # the approved limit


def test_other_quota_changes_record_no_request(
    cast, syncs_started, settings, django_capture_on_commit_callbacks
):
    settings.FAIRSHARE_CLUSTER = "kubeconfig:/nonexistent"  # runs are created, never executed
    with django_capture_on_commit_callbacks(execute=True):
        direct.set_team_quota(cast.team_a, GPU, guarantee="10", limit="40", actor=cast.root)

    (started,) = [c for c in syncs_started if "run_id" not in c]
    assert "quota_requests" not in started
    assert not SyncRun.objects.get().quota_requests.exists()


def test_a_scheduled_grant_is_recorded_on_the_sync_of_its_activation_not_its_approval(
    cast, syncs_started, settings, django_capture_on_commit_callbacks
):
    settings.FAIRSHARE_CLUSTER = "kubeconfig:/nonexistent"
    now = timezone.now()
    start, end = now + timedelta(days=1), now + timedelta(days=2)
    req = submit(cast, window_start=start, window_end=end, now=now)
    with django_capture_on_commit_callbacks(execute=True):
        decisions.approve_request(req.pk, approver=cast.root, now=now)
    (at_approval,) = SyncRun.objects.all()
    assert not at_approval.quota_requests.exists()  # nothing applied yet

    with django_capture_on_commit_callbacks(execute=True):
        grants.expire_temporary_quota(now=start + timedelta(minutes=1))

    at_activation = SyncRun.objects.exclude(pk=at_approval.pk).get()
    assert at_activation.trigger == "quota-change:activate"
    assert list(at_activation.quota_requests.all()) == [req]


def test_a_merged_run_hands_its_requests_to_the_run_that_carries_it_out(
    cast, client, kubeapi, settings, monkeypatch
):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    monkeypatch.setattr(tasks.sync_cluster, "delay", lambda run_id: None)
    req = submit(cast)
    decisions.approve_request(req.pk, approver=cast.root)
    leader = create_run(teams=["team-b"])
    merged = create_run(teams=["team-a"], quota_requests=[req.pk])

    assert run_sync(leader.pk).status == SyncStatus.SUCCEEDED

    merged.refresh_from_db()
    assert (merged.status, merged.merged_into_id) == (SyncStatus.MERGED, leader.pk)
    assert list(leader.quota_requests.all()) == [req]
    # The request page names the run that applied it, not the merged request for one.
    client.force_login(cast.alice)
    page = client.get(reverse("portal:quotarequest", args=[req.pk])).content.decode()
    assert f'href="/sync/{leader.pk}/">sync #{leader.pk}</a>' in page
    assert f'href="/sync/{merged.pk}/"' not in page


def test_the_request_and_its_sync_link_to_each_other_for_whoever_may_see_them(cast, client):
    mine, theirs = submit(cast), submit(cast, team=cast.team_b)
    for req in (mine, theirs):
        decisions.approve_request(req.pk, approver=cast.root)
    run = create_run(teams=["team-a", "team-b"], quota_requests=[mine.pk, theirs.pk])
    run_url = reverse("scheduling:syncrun", args=[run.pk])
    mine_url = reverse("portal:quotarequest", args=[mine.pk])
    theirs_url = reverse("portal:quotarequest", args=[theirs.pk])

    client.force_login(cast.alice)  # lead of team-a
    page = client.get(mine_url)
    assert page.status_code == 200
    assert f'<a href="{run_url}">sync #{run.pk}</a>' in page.content.decode()
    run_page = client.get(run_url)
    assert run_page.status_code == 200
    text = run_page.content.decode()
    assert f'<a href="{mine_url}">request #{mine.pk}</a> (team-a)' in text
    assert theirs_url not in text and "(team-b)" not in text
    assert "and 1 request of other teams" in text
    assert client.get(theirs_url).status_code == 404  # and no way round it

    client.force_login(cast.charlie)  # lead of team-b: the mirror image
    text = client.get(run_url).content.decode()
    assert f'<a href="{theirs_url}">request #{theirs.pk}</a> (team-b)' in text
    assert mine_url not in text

    client.force_login(cast.root)
    text = client.get(run_url).content.decode()
    assert mine_url in text and theirs_url in text and "of other teams" not in text


def test_a_pending_request_names_no_sync(cast, client):
    req = submit(cast)
    client.force_login(cast.alice)

    page = client.get(reverse("portal:quotarequest", args=[req.pk])).content.decode()

    assert "Applied by" not in page


def test_the_sync_api_gives_the_requests_a_run_applied_to_admins_only(cast, client):
    req = submit(cast)
    decisions.approve_request(req.pk, approver=cast.root)
    run = create_run(teams=["team-a"], quota_requests=[req.pk])
    url = reverse("scheduling-api:syncrun-detail", args=[run.pk])

    client.force_login(cast.root)
    assert client.get(url).json()["quota_requests"] == [req.pk]
    listed = client.get(reverse("scheduling-api:syncrun-list")).json()["results"]
    assert [r["quota_requests"] for r in listed] == [[req.pk]]
    client.force_login(cast.alice)
    assert client.get(url).status_code == 403
