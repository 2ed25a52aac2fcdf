"""A snapshot's timestamps moved to the present (monitoring.domain.snapshot_clock)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitoring.domain.snapshot_clock import moment, redate

DEMO = Path(__file__).resolve().parents[2] / "monitoring" / "fixtures" / "demo_cluster.json"
NOW = datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)


def _dump():
    return {
        "kind": "List",
        "apiVersion": "v1",
        "items": [
            {
                "kind": "Node",
                "metadata": {"name": "gpu-1", "creationTimestamp": "2025-08-05T09:00:00Z"},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "lastHeartbeatTime": "2025-11-03T09:00:00Z",
                            "lastTransitionTime": "2025-10-01T00:00:00Z",
                        }
                    ]
                },
            },
            {
                "kind": "Pod",
                "metadata": {
                    "name": "train-0",
                    "namespace": "ml",
                    "creationTimestamp": "2025-11-03T08:20:00Z",
                    "annotations": {"note": "2025-11-03T08:20:00Z", "startTime": "soon"},
                    "managedFields": [{"manager": "kubelet", "time": "2025-11-03T08:21:00Z"}],
                },
                "status": {
                    "startTime": "2025-11-03T08:21:00Z",
                    "containerStatuses": [
                        {"state": {"running": {"startedAt": "2025-11-03T08:22:00Z"}}}
                    ],
                },
            },
            {
                "kind": "Event",
                "metadata": {"name": "e", "creationTimestamp": "2025-11-03T08:59:00Z"},
                "eventTime": "2025-11-03T08:59:00.123456Z",
                "lastTimestamp": None,
            },
            {  # Fairshare's own object, written later by a sync: moved, but not the moment
                "kind": "ResourceQuota",
                "metadata": {"name": "fairshare", "creationTimestamp": "2026-10-01T09:00:00Z"},
            },
        ],
    }


def test_the_moment_is_the_newest_time_of_what_a_collection_reads():
    assert moment(_dump()) == datetime(2025, 11, 3, 9, 0, tzinfo=UTC)  # the node's heartbeat


def test_every_timestamp_moves_by_one_offset_and_ages_are_kept():
    dump = _dump()
    before = copy.deepcopy(dump)
    out = redate(dump, NOW)
    assert dump == before  # the input is not changed

    node, pod, event, quota = out["items"]
    assert node["status"]["conditions"][0]["lastHeartbeatTime"] == "2026-12-07T10:00:00Z"
    assert node["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-04T01:00:00Z"
    assert node["metadata"]["creationTimestamp"] == "2026-09-08T10:00:00Z"
    assert pod["metadata"]["creationTimestamp"] == "2026-12-07T09:20:00Z"  # 40 minutes old
    assert pod["status"]["startTime"] == "2026-12-07T09:21:00Z"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == (
        "2026-12-07T09:22:00Z"
    )
    assert pod["metadata"]["managedFields"][0]["time"] == "2026-12-07T09:21:00Z"
    assert event["eventTime"] == "2026-12-07T09:59:00.123456Z"  # MicroTime keeps its shape
    assert event["lastTimestamp"] is None
    assert quota["metadata"]["creationTimestamp"] == "2027-11-04T10:00:00Z"


def test_values_that_are_not_timestamps_are_copied_as_they_are():
    pod = redate(_dump(), NOW)["items"][1]
    # an annotation's key is not a time field; a time-named key with a non-time value stays
    assert pod["metadata"]["annotations"] == {"note": "2025-11-03T08:20:00Z", "startTime": "soon"}
    assert pod["metadata"]["name"] == "train-0"


def test_a_dump_without_times_is_unchanged_and_now_must_be_aware():
    bare = {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}
    assert redate(bare, NOW) == bare
    with pytest.raises(ValueError, match="timezone-aware"):
        redate(_dump(), datetime(2026, 12, 7, 10, 0))


def test_the_demo_snapshot_moves_whole_and_keeps_its_spacing():
    doc = json.loads(DEMO.read_text())
    out = redate(doc, NOW)
    assert moment(out) == NOW
    offset = NOW - moment(doc)
    moved = 0
    for old, new in zip(doc["items"], out["items"], strict=True):
        before = old["metadata"].get("creationTimestamp")
        after = new["metadata"].get("creationTimestamp")
        if before:
            parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
            assert parse(after) - parse(before) == offset
            moved += 1
    assert moved == len(doc["items"])
    newest_pod = max(
        (i for i in out["items"] if i["kind"] == "Pod"),
        key=lambda i: i["metadata"]["creationTimestamp"],
    )
    age = NOW - datetime.fromisoformat(newest_pod["metadata"]["creationTimestamp"][:-1] + "+00:00")
    assert timedelta(0) < age < timedelta(hours=1)
    assert offset > timedelta(days=300)  # the fixture is dated 2025: moving it matters
