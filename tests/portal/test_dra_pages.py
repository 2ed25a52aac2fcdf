"""The team page shows GPUs in use per GPU product in GPU-equivalents (issue 34): device-plugin GPUs
and DRA claims' GPUs together, a MIG slice as its fraction; a department's figure is its
subtree's; a lead never sees another team's."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from monitoring.models import UsageSample
from tests.base import GPU

H100 = "NVIDIA-H100-80GB-HBM3"
NOW = timezone.now().replace(microsecond=0)
pytestmark = pytest.mark.django_db


def gpus(team, namespace, flavor, allocated):
    UsageSample.objects.create(
        taken_at=NOW,
        team=team,
        namespace=namespace,
        resource=GPU,
        flavor=flavor,
        allocated=Decimal(allocated),
        pending=Decimal(0),
    )


@pytest.fixture
def usage(cast):
    gpus(cast.team_a, "team-a-ml", H100, "2.375")  # two GPUs and three 1g.10gb slices
    gpus(cast.team_a, "team-a-ml", "", "0.5")  # half a shared GPU on an unlabelled node
    gpus(cast.team_b, "team-b-ml", H100, "3")
    return cast


def products(client, slug):
    text = client.get(reverse("portal:team", args=[slug])).content.decode()
    return dict(re.findall(r'data-product="([^"]*)" data-amount="([^"]*)"', text)), text


def test_a_team_sees_its_gpu_equivalents_per_product(client, usage):
    client.force_login(usage.alice)

    shown, text = products(client, "team-a")

    assert shown == {H100: "2.375", "": "0.5"}
    assert f"{H100} 2.375</span>" in text
    assert "nodes without a product label 0.5</span>" in text


def test_a_department_sees_its_subtree(client, usage):
    client.force_login(usage.dora)

    shown, _ = products(client, "dept-x")

    assert shown == {H100: "5.375", "": "0.5"}


def test_a_lead_does_not_see_another_teams_products(client, usage):
    client.force_login(usage.alice)
    response = client.get(reverse("portal:team", args=["team-b"]))
    assert response.status_code in (403, 404)


def request_form(**overrides):
    data = {
        "lines-TOTAL_FORMS": "1",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "lines-0-guarantee": "20",
        "lines-0-limit": "44",
        "justification": "More slices.",
        "window_start": "",
        "window_end": "",
        "tz": "UTC",
    }
    data.update(overrides)
    return data


def test_the_requesters_preview_shows_what_the_team_holds_per_product(client, usage):
    client.force_login(usage.alice)

    response = client.post(reverse("portal:quotarequest_preview", args=["team-a"]), request_form())

    text = response.content.decode()
    assert response.status_code == 200
    assert "In use now, GPU-equivalents per GPU product:" in text
    shown = dict(re.findall(r'data-product="([^"]*)" data-amount="([^"]*)"', text))
    assert shown == {H100: "2.375", "": "0.5"}  # team-a's only: not team-b's 3
