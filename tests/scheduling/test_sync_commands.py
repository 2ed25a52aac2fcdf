"""``manage.py sync`` and ``manage.py export_manifests``."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from quotas.models import Namespace, Team, TeamQuota
from scheduling.choices import SyncStatus
from scheduling.desired import build_cluster_spec
from scheduling.domain.render import file_name, queue_depths, render
from scheduling.models import SyncRun
from tests.base import GPU


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    return kubeapi


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --------------------------------------------------------------------------- sync


def test_sync_prints_a_summary_table(cast, cluster):
    output = run_command("sync")

    run = SyncRun.objects.get()
    assert run.status == SyncStatus.SUCCEEDED
    assert run.trigger == "command"
    lines = output.splitlines()
    assert lines[0] == f"Sync #{run.pk}: succeeded"
    header = next(line for line in lines if line.startswith("kind"))
    assert header.split() == ["kind", "create", "update", "unchanged", "prune", "failed"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[lines.index(header) + 1 :]}
    assert rows["RoleBinding"] == ["6", "0", "0", "0", "0"]
    assert rows["Queue"] == ["3", "0", "0", "0", "0"]
    assert rows["total"] == ["16", "0", "0", "0", "0"]
    assert cluster.get("Queue", "team-a") is not None


def test_sync_with_diff_prints_each_change(cast, cluster):
    run_command("sync")
    TeamQuota.objects.filter(team=cast.team_a, resource=GPU).update(limit=Decimal(48))

    output = run_command("sync", "--diff")

    assert "update ResourceQuota team-a-ml/fairshare" in output
    assert f"  spec.hard.requests.{GPU}: 40 -> 48" in output
    assert "update Queue team-a" in output
    assert "unchanged" not in output.split("total")[-1]


def test_sync_dry_run_changes_nothing(cast, cluster):
    output = run_command("sync", "--dry-run", "--diff")

    assert output.startswith("Dry run #")
    assert "create Queue team-a" in output
    assert cluster.writes() == 0
    assert cluster.get("Queue", "team-a") is None


def test_sync_exits_non_zero_when_objects_fail(cast, cluster, monkeypatch):
    cluster.fault(422, verb="apply", kind="Queue", name="team-b", times=None)

    # The Queue, and the routing of its namespace to it.
    with pytest.raises(CommandError, match=r"Sync #\d+ failed: 2 of 16 objects failed"):
        run_command("sync", "--diff")


def test_sync_exits_non_zero_with_a_clear_message_when_kubernetes_is_disabled(cast, settings):
    settings.FAIRSHARE_CLUSTER = "disabled"

    with pytest.raises(CommandError, match="Kubernetes access is disabled"):
        run_command("sync")

    assert SyncRun.objects.get().status == SyncStatus.FAILED


# --------------------------------------------------------------------------- export


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_export_writes_one_yaml_file_per_object(cast, tmp_path):
    output = run_command("export_manifests", "--out", str(tmp_path))

    files = tree(tmp_path)
    manifests = render(build_cluster_spec())
    depths = queue_depths(manifests)
    names = {file_name(m, depths.get(m["metadata"]["name"], 0)) for m in manifests}
    assert set(files) == names | {".fairshare-export"}
    # Parents before children, Namespaces before their contents (kubectl's lexical walk).
    assert "cluster/queue-0-dept-x.yaml" in files
    assert "cluster/queue-1-team-a.yaml" in files
    assert "namespaces/team-a-ml/00-namespace-team-a-ml.yaml" in files
    assert "namespaces/team-a-ml/resourcequota-fairshare.yaml" in files
    quota = yaml.safe_load(files["namespaces/team-a-ml/resourcequota-fairshare.yaml"])
    assert quota["spec"]["hard"] == {f"requests.{GPU}": "40"}
    assert list(quota) == ["apiVersion", "kind", "metadata", "spec"]
    assert "16 manifests" in output


def test_export_is_byte_identical_for_the_same_database(cast, tmp_path):
    run_command("export_manifests", "--out", str(tmp_path / "one"))
    run_command("export_manifests", "--out", str(tmp_path / "two"))
    second = run_command("export_manifests", "--out", str(tmp_path / "two"))

    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    assert "0 written, 16 unchanged, 0 removed" in second


def test_export_removes_its_stale_files_and_never_others(cast, tmp_path):
    Namespace.objects.create(name="team-b-extra", team=cast.team_b)
    run_command("export_manifests", "--out", str(tmp_path))
    mine = tmp_path / "namespaces" / "team-a-ml" / "NOTES.md"
    mine.write_text("hand-written")
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    Team.objects.filter(pk=cast.team_a.pk).update(active=False)
    Namespace.objects.filter(name="team-b-extra").delete()

    output = run_command("export_manifests", "--out", str(tmp_path))

    files = tree(tmp_path)
    assert "cluster/queue-1-team-a.yaml" not in files
    assert "namespaces/team-a-ml/resourcequota-fairshare.yaml" not in files
    assert files["namespaces/team-a-ml/NOTES.md"] == b"hand-written"
    assert files["kustomization.yaml"] == b"resources: []\n"
    assert not (tmp_path / "namespaces" / "team-b-extra").exists()
    assert "cluster/queue-1-team-b.yaml" in files
    assert "removed" in output and " 0 removed" not in output


def test_export_refuses_a_file_as_output(cast, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")

    with pytest.raises(CommandError, match="not a directory"):
        run_command("export_manifests", "--out", str(target))
