"""Issue 25, item 6: a tier change says what it does (API Warning header, Django admin message
and help text) and its PriorityClass delete and create go out back to back."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from quotas.models import PriorityTier
from scheduling.domain.plan import Change, FieldDiff, apply_waves
from tests.base import PASSWORD

pytestmark = pytest.mark.django_db

KEEPS = "Running and pending pods keep the priority and preemption policy"


@pytest.fixture
def api(cast):
    client = APIClient()
    client.force_authenticate(cast.root)
    return client


def test_the_api_warns_that_pods_keep_the_old_priority_when_a_tier_value_changes(cast, api):
    url = reverse("quotas-api:prioritytier-detail", args=[cast.tier.pk])
    answer = api.patch(url, {"value": 200000}, format="json")
    assert answer.status_code == 200
    warning = answer["Warning"]
    assert warning.startswith('299 - "Tier experiment: value 100000 -> 200000')
    assert KEEPS in warning and "back to back" in warning
    quiet = api.patch(url, {"description": "experiments"}, format="json")
    assert quiet.status_code == 200 and "Warning" not in quiet


def test_the_api_warns_when_a_team_changes_tier(cast, api):
    PriorityTier.objects.create(name="production", value=1000000)
    url = reverse("quotas-api:team-detail", args=["team-a"])
    answer = api.patch(url, {"tier": "production"}, format="json")
    assert answer.status_code == 200
    assert "Team team-a: tier experiment -> production" in answer["Warning"]
    assert KEEPS in answer["Warning"]
    assert "Warning" not in api.patch(url, {"weight": 2}, format="json")


def test_the_django_admin_says_it_on_the_form_and_after_saving(cast):
    client = Client()
    assert client.login(username="root", password=PASSWORD)
    url = reverse("admin:quotas_prioritytier_change", args=[cast.tier.pk])
    assert KEEPS in client.get(url).content.decode()
    answer = client.post(
        url,
        {"name": "experiment", "value": 5, "preemption_policy": "Never", "reclaimable": "on"},
        follow=True,
    )
    assert answer.status_code == 200
    assert "value 100000 -&gt; 5" in answer.content.decode()
    assert KEEPS in answer.content.decode()
    team_form = client.get(reverse("admin:quotas_team_change", args=[cast.team_a.pk]))
    assert KEEPS in team_form.content.decode()


def test_the_priority_class_delete_and_create_go_out_back_to_back():
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "experiment"},
        "value": 5,
        "preemptionPolicy": "Never",
    }
    tier = Change("update", "PriorityClass", None, "experiment", body, (FieldDiff("value", 1, 5),))
    others = [
        Change("create", "PriorityClass", None, f"other-{n}", {**body, "value": n})
        for n in range(3)
    ]
    units = [unit for wave in apply_waves([*others, tier]) for unit in wave]
    [replace] = [unit for unit in units if unit[0].change is tier]
    # One unit: the writer carries both out one after the other, nothing in between.
    assert [step.action for step in replace] == ["delete", "apply"]
