"""Workloads on the pages: the team page's section (constant queries), "request what these
need" (a pre-filled request whose own preview admits them) and the dashboard's waiting work."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from monitoring.collection import collect_usage
from monitoring.models import Workload
from quotas.models import QuotaRequest, Team, TeamQuota
from scheduling.services import compute_shares, what_if_for_request
from scheduling.shares import load_inputs

DEMO = Path(__file__).resolve().parents[2] / "monitoring" / "fixtures" / "demo_cluster.json"
GPU = "nvidia.com/gpu"
NOW = datetime.now(UTC).replace(microsecond=0)


def workload(team, name, *, waiting=True, gpus=8, taken_at=NOW):
    return Workload.objects.create(
        taken_at=taken_at,
        team=team,
        namespace=f"{team.slug}-ml",
        name=name,
        kind="VolcanoJob",
        queue=team.slug,
        gang_size=1,
        requested={GPU: str(gpus)},
        gpus=gpus,
        waiting_for={GPU: str(gpus)} if waiting else {},
        waiting_gpus=gpus if waiting else 0,
        phase="Pending" if waiting else "Running",
        waiting=waiting,
        created=NOW - timedelta(hours=2),
        wait_code="fair-share" if waiting else "",
        wait_reason=f"waiting: {team.slug}'s queue is at its fair allocation, 16 of 16 GPUs"
        if waiting
        else "",
    )


def test_the_team_page_lists_running_and_waiting_workloads_with_reasons(cast, client):
    workload(cast.team_a, "train")
    workload(cast.team_a, "serve", waiting=False)
    workload(cast.team_b, "secret-b")
    client.force_login(cast.alice)

    html = client.get("/teams/team-a/").content.decode()

    assert "team-a-ml/train" in html and "team-a-ml/serve" in html
    assert "waiting: team-a&#x27;s queue is at its fair allocation, 16 of 16 GPUs" in html
    assert "secret-b" not in html
    assert "Request what these need" in html


def test_a_member_sees_workloads_but_not_the_request_action(cast, client):
    workload(cast.team_a, "train")
    client.force_login(cast.bob)

    html = client.get("/teams/team-a/").content.decode()

    assert "team-a-ml/train" in html
    assert "Request what these need" not in html


def test_workloads_sort_by_gpus(cast, client):
    workload(cast.team_a, "small", gpus=1)
    workload(cast.team_a, "big", gpus=32)
    client.force_login(cast.alice)

    html = client.get("/teams/team-a/?wsort=gpus").content.decode()

    assert html.index("team-a-ml/big") < html.index("team-a-ml/small")


def test_the_team_page_runs_a_constant_number_of_queries(cast, client):
    client.force_login(cast.alice)
    workload(cast.team_a, "first")
    with CaptureQueriesContext(connection) as few:
        assert client.get("/teams/team-a/").status_code == 200
    for i in range(40):
        workload(cast.team_a, f"more-{i}", waiting=i % 2 == 0)
    with CaptureQueriesContext(connection) as many:
        assert client.get("/teams/team-a/").status_code == 200

    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_dashboard_shows_waiting_gpus_per_visible_team(cast, client):
    workload(cast.team_a, "a1", gpus=8)
    workload(cast.team_a, "a2", gpus=16)
    workload(cast.team_b, "b1", gpus=4)
    client.force_login(cast.alice)

    html = client.get("/").content.decode()
    section = html[html.index('id="waiting-h"') : html.index('id="teams-h"')]

    assert re.search(r"team-a</a></th><td>2</td><td>24</td>", section)
    assert "team-b" not in section  # alice cannot see team-b


# ---------------------------------------------------------------- request what these need


@pytest.fixture
def demo(db, settings, client):
    call_command("seed_demo", "--quiet")
    settings.FAIRSHARE_CLUSTER = f"snapshot:{DEMO}"
    collect_usage(now=NOW - timedelta(minutes=1))
    compute_shares(trigger="demo", now=NOW - timedelta(seconds=30))
    collect_usage(now=NOW)
    return {(w.namespace, w.name): w for w in Workload.objects.filter(taken_at=NOW)}


def prefilled(client, slug, *workloads):
    response = client.get(f"/teams/{slug}/requests/new/", {"workload": [w.pk for w in workloads]})
    assert response.status_code == 200
    form, formset = response.context["form"], response.context["formset"]
    return response, form, formset


def post_form(client, slug, response):
    """Send the pre-filled form as the browser would."""
    data = dict(response.context["form"].data.items())
    return client.post(f"/teams/{slug}/requests/new/", data)


def admits(request: QuotaRequest, team: Team, needed: dict[str, Decimal]) -> bool:
    preview = what_if_for_request(request).to_dict()
    (row,) = [t for t in preview["teams"] if t["team"] == team.slug]
    fair = row["after"]["fair_allocation"]
    limits = {line.resource: line.limit for line in request.lines.all()}
    current = {q.resource: q.limit for q in team.quotas.all()}
    return all(
        Decimal(fair.get(r, "0")) >= amount and (limits.get(r) or current.get(r)) >= amount
        for r, amount in needed.items()
    )


@pytest.mark.parametrize(
    ("user", "slug", "namespace", "name", "code"),
    [
        ("carl", "cv-team", "cv-vision", "video-pretrain", "fair-share"),
        ("rita", "research-team", "research-ml", "moe-scale", "capability"),
        ("sam", "speech-team", "speech-asr", "asr-batch-eval", "quota"),
    ],
)
def test_a_prefilled_request_admits_its_workloads_by_its_own_preview(
    demo, client, user, slug, namespace, name, code
):
    from django.contrib.auth.models import User

    team = Team.objects.get(slug=slug)
    chosen = demo[(namespace, name)]
    assert chosen.wait_code == code
    held = load_inputs().teams[slug].usage  # what the team's pods hold now (DRF's inputs)
    client.force_login(User.objects.get(username=user))

    response, form, formset = prefilled(client, slug, chosen)

    assert formset.is_valid(), formset.errors
    lines, _ = formset.lines()
    assert GPU in [line.resource for line in lines]
    assert name in form.data["justification"]
    assert response.context["whatif"] and not response.context["whatif"].get("error")
    sent = post_form(client, slug, response)
    assert sent.status_code == 302, sent.content.decode()[:2000]
    request = QuotaRequest.objects.filter(team=team).latest("created", "pk")
    line = request.lines.get(resource=GPU)
    before = TeamQuota.objects.get(team=team, resource=GPU)
    needed = {r: held.get(r, Decimal(0)) + Decimal(a) for r, a in chosen.waiting_for.items()}
    assert held[GPU] > 0
    assert admits(request, team, needed)
    # Smallest: no GPU more than the team holds plus what waits (a refused Job: what its
    # namespace's ResourceQuota needs, see below).
    if code == "fair-share":  # the limit already has room: the guarantee carries it
        assert (line.guarantee, line.limit) == (needed[GPU], before.limit)
    elif code == "capability":
        assert line.limit == needed[GPU]
    else:
        assert line.limit > before.limit


def test_the_smallest_limit_for_a_refused_job_is_what_its_namespace_quota_needs(demo, client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="sam"))
    _response, _form, formset = prefilled(
        client, "speech-team", demo[("speech-asr", "asr-batch-eval")]
    )

    assert formset.is_valid()
    (line,) = formset.lines()[0]
    # speech-asr counts 38 GPUs (34 bound + 4 pending); 16 more need a 54-GPU ResourceQuota,
    # and speech-asr is the team's only namespace.
    assert line.limit == 54


def test_an_outsider_cannot_prefill_from_another_teams_workloads(demo, client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="carl"))  # lead of cv-team
    moe = demo[("research-ml", "moe-scale")]

    assert client.get("/teams/research-team/requests/new/", {"workload": moe.pk}).status_code in (
        403,
        404,
    )
    _response, _form, formset = prefilled(client, "cv-team", moe)  # not cv-team's: ignored
    assert formset.is_valid()
    assert formset.lines()[0] == []
