"""The fake API server's watch, as the API server's watch cache serves it, read through the real
kubernetes client (``kube.watch``): events after a resourceVersion, label filtering
with the previous state, bookmarks, and 410 Expired after the history is compacted — and the
reflector that re-lists on 410 instead of crashing."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes.client import CoreV1Api

from kube.apply import delete
from kube.watch import Expired, Reflector, list_with_version, stream_watch

SELECTOR = "app.kubernetes.io/managed-by=fairshare"
LABELS = {"app.kubernetes.io/managed-by": "fairshare", "fairshare.io/team": "team-a"}


def quota(name, namespace="default", labels=LABELS, gpus="4"):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
    }


def collect(api_client, version, *, timeout=1, **kwargs):
    return list(
        stream_watch(
            api_client,
            "ResourceQuota",
            resource_version=version,
            label_selector=kwargs.get("selector", SELECTOR),
            timeout_seconds=timeout,
        )
    )


def test_a_watch_streams_the_changes_after_its_resource_version(kubeapi):
    client = kubeapi.api_client()
    _, version = list_with_version(client, "ResourceQuota", label_selector=SELECTOR)
    core = CoreV1Api(client)
    core.create_namespaced_resource_quota("default", quota("q1"))
    core.patch_namespaced_resource_quota(
        "q1", "default", {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    )
    core.create_namespaced_resource_quota("default", quota("other", labels={"x": "y"}))
    delete(client, "ResourceQuota", "q1", "default")
    kubeapi.bookmark_interval = 0.2

    events = collect(client, version)

    changes = [
        (e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"
    ]
    assert changes == [("ADDED", "q1"), ("MODIFIED", "q1"), ("DELETED", "q1")]  # not "other"
    modified = events[1]["object"]
    assert modified["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "an idle stream with allowWatchBookmarks gets bookmarks"
    assert set(bookmarks[0]["object"]["metadata"]) == {"resourceVersion"}
    assert kubeapi.counts[("watch", "ResourceQuota")] == 1


def test_an_object_that_stops_matching_the_selector_arrives_as_deleted(kubeapi):
    client = kubeapi.api_client()
    core = CoreV1Api(client)
    core.create_namespaced_resource_quota("default", quota("q1"))
    _, version = list_with_version(client, "ResourceQuota", label_selector=SELECTOR)
    core.patch_namespaced_resource_quota("q1", "default", {"metadata": {"labels": None}})

    events = [e for e in collect(client, version) if e["type"] != "BOOKMARK"]

    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "q1")]


def test_a_watch_from_a_compacted_version_gets_410_expired(kubeapi):
    client = kubeapi.api_client()
    _, version = list_with_version(client, "ResourceQuota", label_selector=SELECTOR)
    CoreV1Api(client).create_namespaced_resource_quota("default", quota("q1"))
    kubeapi.store.compact()

    with pytest.raises(Expired, match="too old resource version"):
        collect(client, version)


def test_the_reflector_relists_after_410_and_keeps_going(kubeapi):
    client = kubeapi.api_client()
    core = CoreV1Api(client)
    core.create_namespaced_resource_quota("default", quota("q1"))
    seen: list[tuple[str, str]] = []
    reflector = Reflector(
        client,
        "ResourceQuota",
        lambda event, obj, old: seen.append((event, obj["metadata"]["name"])),
        timeout_seconds=1,
        backoff=0.1,
    )
    reflector.list()
    assert seen == [("ADDED", "q1")]
    # While nobody watched: q1 deleted, q2 created, and the history compacted past the version.
    delete(client, "ResourceQuota", "q1", "default")
    core.create_namespaced_resource_quota("default", quota("q2"))
    kubeapi.store.compact()
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,))
    thread.start()
    try:
        _wait_until(lambda: reflector.lists == 2)
        core.create_namespaced_resource_quota("default", quota("q3"))
        _wait_until(lambda: ("ADDED", "q3") in seen)
    finally:
        stop.set()
        thread.join(timeout=10)

    assert reflector.expired == 1  # one 410, then a re-list — no crash
    assert seen[:3] == [("ADDED", "q1"), ("ADDED", "q2"), ("DELETED", "q1")]
    assert set(reflector.store) == {("default", "q2"), ("default", "q3")}
    assert not thread.is_alive()


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)
