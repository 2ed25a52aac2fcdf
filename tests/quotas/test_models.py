from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas.models import LimitPolicy, Namespace, QuotaRequest, Team, TeamQuota
from quotas.quantities import format_quantity, parse_quantity

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


def errors_of(obj, **kwargs) -> dict:
    with pytest.raises(ValidationError) as info:
        obj.full_clean(**kwargs)
    return info.value.message_dict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("64Gi", Decimal(64 * 2**30)),
        ("8", Decimal(8)),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
        ("2k", Decimal(2000)),
    ],
)
def test_it_parses_kubernetes_quantities_exactly(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "5 Gi", "-1", "1e400", "NaN", "inf", "12XB", "1" * 80])
def test_it_rejects_malformed_quantities_naming_the_field(text):
    with pytest.raises(ValidationError) as info:
        parse_quantity(text, field="limit")
    assert "limit" in info.value.message_dict


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (Decimal("0.5"), "cpu", "500m"),
        (Decimal(64 * 2**30), "memory", "64Gi"),
        (Decimal(8), GPU, "8"),
        (Decimal(3 * 2**40), "memory", "3Ti"),
        (Decimal("1.000"), "cpu", "1"),
        (Decimal(1000), "memory", "1000"),
        (Decimal("0.0001"), "cpu", "1m"),
    ],
)
def test_it_renders_quantities_canonically(amount, resource, expected):
    assert format_quantity(amount, resource) == expected


def test_team_slug_must_be_a_dns_label():
    errors = errors_of(Team(slug="Team_A", name="A"))
    assert "DNS-1123" in errors["slug"][0]


@pytest.mark.parametrize("weight", [0, 65536])
def test_team_weight_must_be_within_volcano_range(weight):
    errors = errors_of(Team(slug="t", name="T", weight=weight))
    assert "weight" in errors


def test_database_refuses_a_weight_out_of_range():
    with pytest.raises(IntegrityError), transaction.atomic():
        Team.objects.create(slug="t", name="T", weight=70000)


def test_team_cannot_form_a_department_cycle(cast):
    cast.dept.parent = cast.team_a
    errors = errors_of(cast.dept)
    assert errors["parent"] == ["This department choice would create a cycle."]


def test_namespace_name_must_be_a_dns_label(cast):
    errors = errors_of(Namespace(name="x" * 64, team=cast.team_a))
    assert "name" in errors
    errors = errors_of(Namespace(name="Bad.Name", team=cast.team_a))
    assert "name" in errors


def test_namespace_labels_cannot_take_fairshare_keys(cast):
    errors = errors_of(Namespace(name="ok", team=cast.team_a, labels={"fairshare.io/team": "x"}))
    assert "reserved" in errors["labels"][0]


def test_quota_guarantee_cannot_exceed_limit(cast):
    errors = errors_of(TeamQuota(team=cast.team_a, resource="cpu", guarantee=10, limit=5))
    assert errors["guarantee"] == ["Guarantee cannot exceed the limit."]


def test_database_enforces_guarantee_within_limit(cast):
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamQuota.objects.create(team=cast.team_a, resource="cpu", guarantee=10, limit=5)


def test_quota_gpus_must_be_whole_devices(cast):
    TeamQuota(team=cast.team_a, resource="cpu", guarantee=Decimal("0.5"), limit=1).full_clean()
    quota = TeamQuota(
        team=cast.team_a, resource="example.com/fpga", guarantee=Decimal("0.5"), limit=Decimal(2)
    )
    errors = errors_of(quota)
    assert "whole devices" in errors["guarantee"][0]


def test_quota_accepts_quantity_strings_through_full_clean(cast):
    quota = TeamQuota(team=cast.team_a, resource="memory", guarantee="64Gi", limit="128Gi")
    quota.full_clean()
    assert quota.guarantee == Decimal(64 * 2**30)
    assert quota.limit_display == "128Gi"


def test_quota_rejects_bad_quantity_syntax_on_the_field(cast):
    quota = TeamQuota(team=cast.team_a, resource="memory", guarantee="64 gigs", limit="1Ti")
    errors = errors_of(quota)
    assert "Kubernetes quantity" in errors["guarantee"][0]


@pytest.mark.parametrize(
    "name", ["gpu", "nvidia.com/", "kubernetes.io/foo", "Nvidia.com/gpu", "c p u"]
)
def test_quota_resource_must_be_a_kubernetes_resource_name(cast, name):
    errors = errors_of(TeamQuota(team=cast.team_a, resource=name, guarantee=0, limit=1))
    assert "resource" in errors


@pytest.mark.parametrize(
    "name", ["cpu", "memory", GPU, "nvidia.com/mig-1g.10gb", "rdma/rdma_shared", "hugepages-2Mi"]
)
def test_quota_accepts_standard_and_extended_resources(cast, name):
    TeamQuota(team=cast.dept, resource=name, guarantee=0, limit=1).full_clean()


def test_request_window_must_end_after_it_starts(cast):
    now = timezone.now()
    request = QuotaRequest(
        team=cast.team_a,
        requester=cast.alice,
        justification="x",
        window_start=now,
        window_end=now - timedelta(hours=1),
    )
    errors = errors_of(request)
    assert errors["window_end"] == ["The window must end after it starts."]


def test_limit_policy_rules_name_their_fields(cast):
    policy = LimitPolicy(
        team=cast.team_a,
        resource=GPU,
        default_request=Decimal(2),
        default_limit=Decimal(1),
        enforce_quota_limit=True,
    )
    errors = errors_of(policy)
    assert "default_request" in errors
    assert "enforce_quota_limit" in errors


def test_limit_policy_namespace_must_belong_to_the_team(cast):
    other_ns = cast.team_b.namespaces.get()
    errors = errors_of(LimitPolicy(team=cast.team_a, namespace=other_ns, resource="cpu"))
    assert errors["namespace"] == ["The namespace must belong to the same team."]


# Kubernetes' label rules (apimachinery validation.go), so a sync never meets a 422 for them.
@pytest.mark.parametrize(
    "labels",
    [
        {"env": "<script>"},
        {"env": "a b"},
        {"env": "-dev"},
        {"env": "x" * 64},
        {"bad key": "dev"},
        {"/env": "dev"},
        {"Example.COM/env": "dev"},
        {"x" * 64: "dev"},
        {"kubernetes.io/metadata.name": "other"},
    ],
)
def test_namespace_labels_follow_the_kubernetes_label_rules(cast, labels):
    errors = errors_of(Namespace(name="ok", team=cast.team_a, labels=labels))
    assert "labels" in errors, labels


@pytest.mark.parametrize(
    "labels",
    [
        {"env": "dev"},
        {"env": ""},
        {"example.com/cost-center": "CC_1.2"},
        {"Owner": "A-b_c.9"},
        {"x" * 63: "y" * 63},
    ],
)
def test_valid_kubernetes_labels_are_accepted(cast, labels):
    Namespace(name="ok", team=cast.team_a, labels=labels).full_clean()


def test_a_bad_label_through_the_api_is_a_400_naming_labels(cast):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(cast.root)
    response = client.post(
        "/api/v1/namespaces/",
        {"name": "team-a-dev", "team": "team-a", "labels": {"env": "<script>"}},
        format="json",
    )
    assert response.status_code == 400
    assert "'<script>'" in response.json()["errors"]["labels"][0]
    assert not Namespace.objects.filter(name="team-a-dev").exists()
