"""The dump the issue names, made by the real kubectl: ``kubectl get nodes,pods,resourceclaims,
resourceslices,deviceclasses -A -o json`` against the fake API server holding the DRA cluster of
tests/monitoring/fixtures/dra_cluster.json, read back by ``collect_usage --snapshot FILE
--print``, gives the usage the fixture gives (kubectl finds the ``resource.k8s.io/v1`` kinds
through discovery, as on a real cluster, and lists them all namespaces at once)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from monitoring.collectors import k8s_usage
from tests.kubeapi.kubectl import kubectl
from tests.monitoring.test_dra_live import FIXTURE, TEAMS, fixture_objects

DUMP = ("get", "nodes,pods,resourceclaims,resourceslices,deviceclasses", "-A", "-o", "json")


@pytest.fixture
def dump(kubeapi, tmp_path):
    kubeapi.load(fixture_objects())
    result = kubectl(str(kubeapi.kubeconfig_path), *DUMP)
    path = tmp_path / "dump.json"
    path.write_text(result.stdout)
    return path


def test_kubectls_dump_holds_every_dra_object(dump):
    kinds = [item["kind"] for item in json.loads(dump.read_text())["items"]]
    assert (kinds.count("ResourceClaim"), kinds.count("ResourceSlice")) == (12, 3)
    assert kinds.count("DeviceClass") == 2


def test_kubectls_dump_counts_as_the_fixture_does(dump):
    from_kubectl = k8s_usage.from_snapshot(dump, TEAMS).to_json_dict()
    from_fixture = k8s_usage.from_snapshot(FIXTURE, TEAMS).to_json_dict()
    assert from_kubectl == from_fixture


@pytest.mark.django_db
def test_collect_usage_prints_the_dra_counts_of_kubectls_dump(dump):
    out = io.StringIO()
    call_command("collect_usage", snapshot=str(dump), print_json=True, stdout=out)
    printed = json.loads(out.getvalue())
    fixture = k8s_usage.from_snapshot(FIXTURE, {}).to_json_dict()
    assert printed["namespaces"]["ml-c"]["allocated"] == fixture["namespaces"]["ml-c"]["allocated"]
    assert any(
        key.endswith(".deviceclass.resource.k8s.io/devices")
        for key in printed["namespaces"]["ml-c"]["allocated"]
    )
