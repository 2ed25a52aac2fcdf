"""The sync pages: runs × roles, items scoped to the viewer's teams, readable diffs and drift,
starting syncs (admins, POST + CSRF), the polling progress partial, constant query counts."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import SyncAction, SyncStatus
from scheduling.models import SyncItem, SyncRun
from scheduling.views import diff_rows

pytestmark = pytest.mark.django_db

QUOTA_DIFF = (
    "update ResourceQuota team-a-ml/fairshare\n"
    "  spec.hard.requests.nvidia.com/gpu: 40 -> 56\n"
    "drift (changed in the cluster since Fairshare applied it; applied -> live):\n"
    "  spec.hard.requests.cpu: 100 -> 7"
)


def login(client: Client, user) -> Client:
    client.force_login(user)
    return client


@pytest.fixture
def run(cast):
    """A finished sync: team-a's quota updated with drift, team-b's queue created, a
    PriorityClass unchanged (no team) and team-b's namespace failed."""
    now = timezone.now()
    run = SyncRun.objects.create(
        status=SyncStatus.FAILED,
        trigger="quota-change:approve",
        started_at=now,
        finished_at=now,
        total=4,
        done=4,
        created_count=1,
        updated_count=1,
        unchanged_count=1,
        failed_count=1,
        drift_count=1,
        log="4 objects: secret-team-c details",
        error="1 of 4 objects failed; the other changes were applied.",
    )
    SyncItem.objects.bulk_create(
        [
            SyncItem(
                run=run,
                kind="ResourceQuota",
                namespace="team-a-ml",
                name="fairshare",
                team_slug="team-a",
                action=SyncAction.UPDATE,
                planned_action=SyncAction.UPDATE,
                drift=True,
                diff=QUOTA_DIFF,
            ),
            SyncItem(
                run=run,
                kind="Queue",
                name="team-b",
                team_slug="team-b",
                action=SyncAction.CREATE,
                diff="create Queue team-b\n  spec.weight: (none) -> 3",
            ),
            SyncItem(run=run, kind="PriorityClass", name="experiment", action=SyncAction.UNCHANGED),
            SyncItem(
                run=run,
                kind="Namespace",
                name="team-b-ml",
                team_slug="team-b",
                action=SyncAction.FAILED,
                planned_action=SyncAction.UPDATE,
                error="422 Unprocessable Entity: bad label",
            ),
        ]
    )
    return run


# --------------------------------------------------------------------------- diffs


def test_diff_rows_split_fields_and_mark_the_drift_section():
    assert diff_rows(QUOTA_DIFF) == [
        {
            "path": "spec.hard.requests.nvidia.com/gpu",
            "old": "40",
            "new": "56",
            "old_shown": "40",
            "new_shown": "56",
            "drift": False,
        },
        {
            "path": "spec.hard.requests.cpu",
            "old": "100",
            "new": "7",
            "old_shown": "100",
            "new_shown": "7",
            "drift": True,
        },
    ]
    assert diff_rows("") == []
    assert diff_rows("create X y\n  not a field line") == [
        {"text": "not a field line", "drift": False}
    ]


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        # 5702912Mi is 5.44Ti; 6291456Mi exactly 6Ti.
        ("spec.hard.requests.memory: 5702912Mi -> 6291456Mi", ("5.4Ti", "6Ti")),
        ("spec.capability.memory: (none) -> 1536Mi", ("(none)", "1.5Gi")),
        ("spec.limits[0].max.memory: 3Gi -> 1536Mi", ("3Gi", "1.5Gi")),
        ("spec.deserved.cpu: 22521600m -> 100", ("22521.6", "100")),
        ("spec.guarantee.resource.nvidia.com/gpu: 40 -> 56", ("40", "56")),
        # Not an amount: as it is.
        ("spec.weight: 1 -> 2", ("1", "2")),
        ("metadata.labels.app: 5702912Mi -> x", ("5702912Mi", "x")),
        # Human forms that would read the same (5.4Ti → 5.4Ti): both exact.
        ("spec.hard.requests.memory: 5702912Mi -> 5702913Mi", ("5702912Mi", "5702913Mi")),
    ],
)
def test_diff_rows_show_amounts_in_human_units_and_keep_the_exact_value(line, shown):
    [row] = diff_rows(f"update ResourceQuota ns/fairshare\n  {line}")

    assert (row["old_shown"], row["new_shown"]) == shown
    path, _, rest = line.partition(": ")
    assert (row["path"], f"{row['old']} -> {row['new']}") == (path, rest)


def test_the_run_page_shows_memory_in_human_units_with_the_exact_value_as_title(client, cast):
    run = SyncRun.objects.create(status=SyncStatus.SUCCEEDED, trigger="ui", updated_count=1)
    SyncItem.objects.create(
        run=run,
        kind="ResourceQuota",
        namespace="team-a-ml",
        name="fairshare",
        team_slug="team-a",
        action=SyncAction.UPDATE,
        diff="update ResourceQuota team-a-ml/fairshare\n"
        "  spec.hard.requests.memory: 5702912Mi -> 6291456Mi",
    )

    html = login(client, cast.alice).get(reverse("scheduling:syncrun", args=[run.pk]))

    text = html.content.decode()
    assert '<code title="5702912Mi">5.4Ti</code>' in text
    assert '<code title="6291456Mi">6Ti</code>' in text
    assert ">5702912Mi<" not in text


# --------------------------------------------------------------------------- page × role

WHO = ("root", "alice", "bob", "vic", "charlie", "dora", "nobody")


@pytest.mark.parametrize("who", WHO)
def test_everyone_signed_in_sees_the_runs(client, cast, run, who):
    login(client, getattr(cast, who))

    assert client.get(reverse("scheduling:syncrun_list")).status_code == 200
    assert client.get(reverse("scheduling:syncrun", args=[run.pk])).status_code == 200
    assert client.get(reverse("scheduling:syncrun_progress", args=[run.pk])).status_code == 200


def test_anonymous_visitors_are_sent_to_the_login_page(client, run):
    for url in (
        reverse("scheduling:syncrun_list"),
        reverse("scheduling:syncrun", args=[run.pk]),
        reverse("scheduling:syncrun_progress", args=[run.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_unknown_runs_are_404(client, cast):
    login(client, cast.root)
    assert client.get(reverse("scheduling:syncrun", args=[999999])).status_code == 404


def items_shown(client, run, show="all") -> set[str]:
    response = client.get(reverse("scheduling:syncrun", args=[run.pk]), {"show": show})
    return {row["item"].name for row in response.context["rows"]}


def test_admins_see_every_item_with_the_runs_log_and_error(client, cast, run):
    login(client, cast.root)
    assert items_shown(client, run) == {"fairshare", "team-b", "experiment", "team-b-ml"}

    body = client.get(reverse("scheduling:syncrun", args=[run.pk])).content.decode()
    assert "secret-team-c details" in body
    assert "1 of 4 objects failed" in body
    assert "422 Unprocessable Entity: bad label" in body


@pytest.mark.parametrize(("who", "expected"), [
    ("alice", {"fairshare"}),
    ("bob", {"fairshare"}),
    ("vic", {"fairshare"}),
    ("charlie", {"team-b", "team-b-ml"}),
    ("dora", {"fairshare", "team-b", "team-b-ml"}),  # leads the department: both teams
    ("nobody", set()),
])  # fmt: skip
def test_others_see_only_their_teams_items_and_never_the_runs_log(client, cast, run, who, expected):
    login(client, getattr(cast, who))

    assert items_shown(client, run) == expected
    body = client.get(reverse("scheduling:syncrun", args=[run.pk])).content.decode()
    assert "secret-team-c details" not in body
    assert "1 of 4 objects failed" not in body
    assert "experiment" not in body  # the team-less PriorityClass is for admins


def test_a_leads_counts_cover_their_teams_items_only(client, cast, run):
    login(client, cast.charlie)

    response = client.get(reverse("scheduling:syncrun_list"))
    [row] = response.context["rows"]
    assert row["counts"] == {
        "create": 1,
        "update": 0,
        "prune": 0,
        "failed": 1,
        "unchanged": None,  # the list counts changes only; the run page counts everything
        "drift": 0,
    }
    detail = client.get(reverse("scheduling:syncrun", args=[run.pk]))
    assert detail.context["counts"]["drift"] == 0
    assert {f["name"]: f["count"] for f in detail.context["filters"]} == {
        "changes": 2,
        "drift": 0,
        "failed": 1,
        "all": 2,
    }


def test_the_run_page_highlights_drift_and_shows_diffs_as_fields(client, cast, run):
    login(client, cast.alice)

    response = client.get(reverse("scheduling:syncrun", args=[run.pk]), {"show": "drift"})

    body = response.content.decode()
    assert [row["item"].name for row in response.context["rows"]] == ["fairshare"]
    assert 'class="drift-row"' in body
    assert "<code>spec.hard.requests.nvidia.com/gpu</code>" in body
    assert "(changed in the cluster)" in body


def test_unchanged_items_are_hidden_until_asked_for(client, cast, run):
    login(client, cast.root)

    assert "experiment" not in items_shown(client, run, show="changes")
    assert items_shown(client, run, show="failed") == {"team-b-ml"}
    assert "experiment" not in items_shown(client, run, show="nonsense")  # → changes
    assert "experiment" in items_shown(client, run, show="all")


# --------------------------------------------------------------------------- starting syncs


@pytest.mark.parametrize(("mode", "dry_run"), [("sync", False), ("dry-run", True)])
def test_an_admin_starts_a_sync_and_lands_on_the_run(
    client, cast, mode, dry_run, django_capture_on_commit_callbacks
):
    login(client, cast.root)
    with (
        mock.patch("scheduling.tasks.sync_cluster.delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post(reverse("scheduling:sync_start"), {"mode": mode})

    run = SyncRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("scheduling:syncrun", args=[run.pk])
    assert (run.status, run.dry_run, run.trigger, run.requested_by) == (
        SyncStatus.QUEUED,
        dry_run,
        "ui",
        cast.root,
    )
    delay.assert_called_once_with(run_id=run.pk)


@pytest.mark.parametrize("who", ["alice", "bob", "charlie", "nobody"])
def test_only_admins_start_syncs_and_see_the_buttons(client, cast, who):
    login(client, getattr(cast, who))
    with mock.patch("scheduling.tasks.sync_cluster.delay") as delay:
        response = client.post(reverse("scheduling:sync_start"), {"mode": "sync"})

    assert response.status_code == 403
    assert not SyncRun.objects.exists()
    delay.assert_not_called()
    assert b"Sync now" not in client.get(reverse("scheduling:syncrun_list")).content


def test_starting_needs_post_csrf_and_a_known_mode(cast):
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.root)
    assert client.get(reverse("scheduling:sync_start")).status_code == 405
    assert client.post(reverse("scheduling:sync_start"), {"mode": "sync"}).status_code == 403

    client = login(Client(), cast.root)
    response = client.post(reverse("scheduling:sync_start"), {"mode": "everything"})
    assert response.status_code == 302
    assert not SyncRun.objects.exists()


def test_the_buttons_are_post_forms_with_a_csrf_token(client, cast):
    login(client, cast.root)
    body = client.get(reverse("scheduling:syncrun_list")).content.decode()
    assert f'method="post" action="{reverse("scheduling:sync_start")}"' in body
    assert "csrfmiddlewaretoken" in body
    assert 'value="dry-run"' in body and 'value="sync"' in body


def test_without_a_cluster_the_ui_says_plan_only_before_and_after(
    client, cast, settings, django_capture_on_commit_callbacks
):
    """Snapshot mode (the demo) only plans: the button, its confirmation, the message and the
    run page say so, and even a forged "sync" becomes a plan."""
    settings.FAIRSHARE_CLUSTER = "snapshot:/tmp/demo.json"
    login(client, cast.root)
    page = client.get(reverse("scheduling:syncrun_list")).content.decode()
    assert "Plan only — no cluster connected" in page
    assert "Plan sync (no cluster)" in page and 'value="sync"' not in page
    assert 'data-confirm="Plan only — no cluster connected.' in page

    with (
        mock.patch("scheduling.tasks.sync_cluster.delay"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post(reverse("scheduling:sync_start"), {"mode": "sync"}, follow=True)

    run = SyncRun.objects.get()
    assert run.dry_run is True
    body = response.content.decode()
    assert f"Plan #{run.pk} queued. Plan only — no cluster connected: nothing is applied." in body
    assert f"<h1>Plan #{run.pk}" in body and "Planned against the objects in the cluster" in body


# --------------------------------------------------------------------------- progress


@pytest.mark.parametrize("status", [SyncStatus.QUEUED, SyncStatus.RUNNING])
def test_an_active_run_polls_its_progress_every_two_seconds(client, cast, status):
    run = SyncRun.objects.create(status=status, total=10, done=4, heartbeat_at=timezone.now())
    login(client, cast.alice)

    body = client.get(reverse("scheduling:syncrun", args=[run.pk])).content.decode()

    url = reverse("scheduling:syncrun_progress", args=[run.pk])
    assert f'hx-get="{url}?poll=1" hx-trigger="every 2s"' in body
    if status == SyncStatus.RUNNING:
        assert "4 of 10 objects" in body


def test_a_finished_run_stops_polling_and_the_last_poll_reloads_the_page(client, cast, run):
    login(client, cast.alice)
    url = reverse("scheduling:syncrun_progress", args=[run.pk])

    page = client.get(reverse("scheduling:syncrun", args=[run.pk])).content.decode()
    poll = client.get(url, {"poll": "1"}, headers={"HX-Request": "true"})

    assert "every 2s" not in page
    assert "every 2s" not in poll.content.decode()
    assert poll["HX-Refresh"] == "true"
    assert "HX-Refresh" not in client.get(url)  # not a poll: just the partial


# --------------------------------------------------------------------------- query counts


def add_runs(count: int, cast) -> None:
    for _ in range(count):
        r = SyncRun.objects.create(status=SyncStatus.SUCCEEDED, requested_by=cast.root)
        SyncItem.objects.bulk_create(
            SyncItem(
                run=r,
                kind="Queue",
                name=f"q{i}",
                team_slug="team-a",
                action=SyncAction.UPDATE,
                drift=bool(i % 2),
                diff="update Queue q\n  spec.weight: 1 -> 2",
            )
            for i in range(5)
        )


@pytest.mark.parametrize("who", ["root", "alice"])
def test_sync_pages_run_a_constant_number_of_queries(
    client, cast, django_assert_max_num_queries, who
):
    add_runs(2, cast)
    login(client, getattr(cast, who))
    latest = SyncRun.objects.order_by("-id").first()
    urls = [reverse("scheduling:syncrun_list"), reverse("scheduling:syncrun", args=[latest.pk])]
    few = []
    for url in urls:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url, {"show": "all"}).status_code == 200
        few.append(len(ctx.captured_queries))

    add_runs(20, cast)
    latest = SyncRun.objects.order_by("-id").first()
    SyncItem.objects.bulk_create(
        SyncItem(run=latest, kind="Queue", name=f"x{i}", team_slug="team-a", action="create")
        for i in range(40)
    )
    urls[1] = reverse("scheduling:syncrun", args=[latest.pk])
    for url, limit in zip(urls, few, strict=True):
        with django_assert_max_num_queries(limit):
            assert client.get(url, {"show": "all"}).status_code == 200
