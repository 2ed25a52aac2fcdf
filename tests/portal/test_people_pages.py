"""Issue 14's people-facing pieces through the Django test client: the request form keeps its
preview after a validation error and names the invalid fields for the live highlight, the queue
flags overlapping requests, the dashboard shows departments with their teams' usage and only the
resources that matter."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from monitoring.models import UsageSample
from quotas import decisions, lines
from scheduling.services import compute_shares
from tests.base import GPU

pytestmark = pytest.mark.django_db


def form_data(guarantee="20", limit="40", justification="Sweep."):
    return {
        "lines-TOTAL_FORMS": "2",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "lines-0-resource": GPU,
        "lines-0-guarantee": guarantee,
        "lines-0-limit": limit,
        "lines-1-resource": "",
        "lines-1-guarantee": "",
        "lines-1-limit": "",
        "justification": justification,
        "window_start": "",
        "window_end": "",
    }


def test_a_refused_request_keeps_the_preview_of_the_posted_amounts(client, cast):
    client.force_login(cast.alice)
    url = reverse("portal:quotarequest_create", args=["team-a"])

    response = client.post(url, form_data(guarantee="25", limit="150"))

    assert response.status_code == 200
    text = response.content.decode()
    assert "The cluster has 100 GPUs; a limit of 150 GPUs could never be used." in text
    assert response.context["whatif"]["focus"]["slug"] == "team-a"  # not reset to the hint
    assert response.context["invalid_fields"] == ["lines-0-limit"]
    assert 'data-invalid-fields="lines-0-limit"' in text


def test_the_live_preview_names_the_invalid_fields(client, cast):
    client.force_login(cast.alice)
    url = reverse("portal:quotarequest_preview", args=["team-a"])

    bad = client.post(url, form_data(guarantee="lots")).content.decode()
    good = client.post(url, form_data(guarantee="25")).content.decode()

    assert 'data-invalid-fields="lines-0-guarantee"' in bad
    assert "Fix the highlighted amounts" in bad
    assert "data-invalid-fields" not in good
    assert "What team-a gets" in good
    assert "When every team wants its limit" in good


def test_the_queue_flags_overlapping_requests(client, cast):
    first, second = (
        decisions.submit_request(
            team=cast.team_a,
            requester=cast.alice,
            lines=[lines.LineInput(GPU, g, "40")],
            justification="more",
        )
        for g in ("25", "28")
    )
    client.force_login(cast.root)
    text = client.get(reverse("portal:approval_queue")).content.decode()
    assert f"Overlaps pending request #{second.pk}" in text
    assert f"Overlaps pending request #{first.pk}" in text


def test_the_dashboard_rolls_usage_up_to_departments_and_hides_pods(client, cast):
    cast.capacity.resources = {GPU: "100", "cpu": "1000", "pods": "1100", "hugepages-1Gi": "0"}
    cast.capacity.save()
    UsageSample.objects.create(
        taken_at=timezone.now(),
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        allocated=Decimal(12),
    )
    compute_shares(trigger="test")
    client.force_login(cast.root)

    response = client.get(reverse("home"))

    rows = {row["team"].slug: row for row in response.context["rows"]}
    assert [row["team"].slug for row in response.context["rows"]] == ["dept-x", "team-a", "team-b"]
    assert (rows["dept-x"]["depth"], rows["team-a"]["depth"]) == (0, 1)
    assert rows["dept-x"]["gpu_allocated"] == 12
    assert [r["resource"] for r in response.context["capacity_rows"]] == [GPU, "cpu"]
    assert "hugepages" not in response.content.decode()
