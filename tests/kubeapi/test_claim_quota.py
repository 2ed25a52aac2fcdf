"""The fake's ResourceQuota admission for ResourceClaims (``claimquota.py``)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from monitoring.domain.dra import class_devices, class_resource
from tests.kubeapi.claimquota import CLAIM_COUNT, claim_usage

GROUP, VERSION = "resource.k8s.io", "v1"
GPU_DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"


def claim(name, *requests):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": list(requests)}},
    }


def exactly(name="r", device_class="gpu.nvidia.com", **extra):
    return {"name": name, "exactly": {"deviceClassName": device_class, **extra}}


def first_available(*subs, name="r"):
    return {
        "name": name,
        "firstAvailable": [
            {"name": f"s{i}", "deviceClassName": c, **extra} for i, (c, extra) in enumerate(subs)
        ],
    }


# resource_claims_test.go TestResourceClaimEvaluatorUsage, by case name.
UPSTREAM_CASES = {
    "simple": (claim("c", exactly()), {"gpu": 1}),
    "many-requests": (claim("c", exactly("a"), exactly("b", count=2)), {"gpu": 3}),
    "count": (claim("c", exactly(count=5)), {"gpu": 5}),
    "all": (claim("c", exactly(allocationMode="All")), {"gpu": 32}),
    "unknown-count-mode": (claim("c", exactly(allocationMode="Other")), {"gpu": 0}),
    "admin": (claim("c", exactly(adminAccess=True, count=2)), {"gpu": 2}),
    "prioritized-list-multiple-subrequests": (
        claim("c", first_available(("gpu.nvidia.com", {"count": 2}), ("gpu.nvidia.com", {}))),
        {"gpu": 2},
    ),
    "prioritized-list-allocation-mode-all": (
        claim(
            "c",
            first_available(("gpu.nvidia.com", {}), ("gpu.nvidia.com", {"allocationMode": "All"})),
        ),
        {"gpu": 32},
    ),
    "prioritized-list-different-device-classes": (
        claim(
            "c", first_available(("gpu.nvidia.com", {}), ("tpu.example", {"allocationMode": "All"}))
        ),
        {"gpu": 1, "tpu": 32},
    ),
}
CLASSES = {"gpu": "gpu.nvidia.com", "tpu": "tpu.example"}


@pytest.mark.parametrize("case", sorted(UPSTREAM_CASES))
def test_the_charge_is_upstreams_and_agrees_with_fairshares_counting(case):
    body, devices = UPSTREAM_CASES[case]
    expected = {CLAIM_COUNT: 1, **{class_resource(CLASSES[k]): n for k, n in devices.items()}}

    assert claim_usage(body) == expected
    # the product's independent implementation (monitoring.domain.dra, Rule 2) agrees
    assert {class_resource(c): n for c, n in class_devices(body).items()} == {
        k: v for k, v in expected.items() if k != CLAIM_COUNT
    }


@pytest.fixture
def custom(kubeapi):
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-a"}})
    return client.CustomObjectsApi(kubeapi.api_client())


def put_quota(kubeapi, **hard):
    kubeapi.put_object(
        {
            "kind": "ResourceQuota",
            "metadata": {"name": "fairshare", "namespace": "team-a"},
            "spec": {"hard": hard},
        }
    )


def create(custom, body):
    return custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "resourceclaims", body)


def refusal(custom, body) -> dict:
    with pytest.raises(ApiException) as exc:
        create(custom, body)
    assert exc.value.status == 403
    return json.loads(exc.value.body)


def test_claims_are_charged_until_the_device_class_quota_is_full(kubeapi, custom):
    put_quota(kubeapi, **{GPU_DEVICES: "2"})

    create(custom, claim("two", exactly(count=2)))
    status = refusal(custom, claim("third", exactly()))

    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'resourceclaims.resource.k8s.io "third" is forbidden: exceeded quota: fairshare, '
        f"requested: {GPU_DEVICES}=1, used: {GPU_DEVICES}=2, limited: {GPU_DEVICES}=2"
    )
    assert status["details"] == {"name": "third", "group": GROUP, "kind": "resourceclaims"}
    assert [c["metadata"]["name"] for c in kubeapi.objects("ResourceClaim", "team-a")] == ["two"]


def test_a_deleted_claim_frees_its_devices_and_get_works(kubeapi, custom):
    put_quota(kubeapi, **{GPU_DEVICES: "2"})
    create(custom, claim("two", exactly(count=2)))

    got = custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "resourceclaims", "two")
    custom.delete_namespaced_custom_object(GROUP, VERSION, "team-a", "resourceclaims", "two")
    create(custom, claim("again", exactly(count=2)))

    assert got["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


def test_admin_access_and_every_first_available_class_are_charged(kubeapi, custom):
    put_quota(
        kubeapi, **{GPU_DEVICES: "2", "mig.nvidia.com.deviceclass.resource.k8s.io/devices": 1}
    )

    create(custom, claim("admin", exactly(adminAccess=True)))
    create(custom, claim("either", first_available(("gpu.nvidia.com", {}), ("mig.nvidia.com", {}))))

    assert (
        "requested: mig.nvidia.com"
        in refusal(custom, claim("m", exactly("r", "mig.nvidia.com")))["message"]
    )
    assert f"used: {GPU_DEVICES}=2" in refusal(custom, claim("g", exactly()))["message"]


def test_the_claim_count_is_charged_and_other_quotas_do_not_apply(kubeapi, custom):
    put_quota(kubeapi, **{CLAIM_COUNT: "1", "requests.cpu": "1"})
    kubeapi.put_object(
        {
            "kind": "ResourceQuota",
            "metadata": {"name": "scoped", "namespace": "team-a"},
            "spec": {"hard": {GPU_DEVICES: "0"}, "scopes": ["BestEffort"]},
        }
    )

    create(custom, claim("one", exactly(count=8)))
    status = refusal(custom, claim("two", exactly()))

    assert status["message"].endswith(
        f"requested: {CLAIM_COUNT}=1, used: {CLAIM_COUNT}=1, limited: {CLAIM_COUNT}=1"
    )


def test_claims_without_quota_are_not_limited(kubeapi, custom):
    create(custom, claim("many", exactly(allocationMode="All")))

    assert kubeapi.get("ResourceClaim", "many", "team-a") is not None


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"name": "r"}, "spec.devices.requests[0]"),
        (exactly(count=0), "spec.devices.requests[0].exactly.count"),
        (
            {"name": "r", "exactly": {"count": 1}},
            "spec.devices.requests[0].exactly.deviceClassName",
        ),
        (
            first_available(("gpu.nvidia.com", {"allocationMode": "Some"})),
            "spec.devices.requests[0].firstAvailable[0].allocationMode",
        ),
    ],
)
def test_what_quota_reads_is_validated(custom, request_, field):
    with pytest.raises(ApiException) as exc:
        create(custom, claim("bad", request_))

    assert exc.value.status == 422
    assert [c["field"] for c in json.loads(exc.value.body)["details"]["causes"]] == [field]


def test_a_device_class_quota_name_is_accepted_in_strict_mode(kubeapi):
    core = client.CoreV1Api(kubeapi.api_client())
    kubeapi.put_object({"kind": "Namespace", "metadata": {"name": "team-b"}})

    created = core.create_namespaced_resource_quota(
        "team-b", {"metadata": {"name": "q"}, "spec": {"hard": {GPU_DEVICES: "2"}}}
    )

    assert created.spec.hard == {GPU_DEVICES: "2"}


def test_a_server_side_apply_create_is_charged_too(kubeapi, custom):
    put_quota(kubeapi, **{GPU_DEVICES: "1"})
    create(custom, claim("one", exactly()))
    body = {**claim("two", exactly()), "metadata": {"name": "two", "namespace": "team-a"}}

    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "team-a",
            "resourceclaims",
            "two",
            body,
            field_manager="test",
            _content_type="application/apply-patch+yaml",
        )

    assert exc.value.status == 403
    assert "exceeded quota: fairshare" in json.loads(exc.value.body)["message"]
