"""Soak the cluster sync under faults: many runs against the fake API server, then convergence.

Usage (a scratch database whose name contains "soak"; the script migrates and *flushes* it, and
refuses any other database). Not part of the default test run; a short version with the same
end checks is ``tests/hardening/test_sync_faults.py``.

    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE fairshare_soak'
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairshare_soak \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/15 .venv/bin/python bench/soak_sync.py

or SQLite: ``DATABASE_URL=sqlite:////tmp/fairshare_soak.sqlite3 .venv/bin/python
bench/soak_sync.py`` (no Redis URL: single flight is then the database claim).
Options: ``--runs 120 --seed 1``.

What one soak does, on a seeded RNG (:class:`Soak`):

* the fake API server (tests/kubeapi) is seeded with *unlabelled look-alikes* of our objects —
  the same kinds, some with our names in other namespaces, some carrying our team label or
  another manager's ``managed-by`` — which no sync may ever delete or change;
* before most runs, fault rules are injected: 500/503, 429 with Retry-After, timeouts (the
  request is held longer than the client's read timeout), 409 conflicts and connection resets,
  each once, a few times, or flaky (a probability per request); now and then the server
  restarts between runs, or during one, and sometimes loses its whole state (as if etcd were
  restored empty);
* between some runs the tenancy changes: quota requests approved, quotas set directly, teams
  deactivated and reactivated, namespaces added, shares recomputed;
* the retry back-off is recorded but slept for at most ``sleep_cap`` seconds, so Retry-After is
  honoured in what is *asked* for without making the soak slow;
* at the end, faults off: one sync must converge, the next must write nothing, and a dry run
  must plan only ``unchanged``. Checked throughout: every failed run and failed item has an
  error, no run is left queued or running, counters match items, no DELETE ever reached an
  object without our label (every DELETE the server serves is recorded), and every look-alike
  is still there, unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "soak-only-not-a-secret")
    os.environ.setdefault("FAIRSHARE_LOG_LEVEL", "ERROR")
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.dummy.EmailBackend")
    import django

    django.setup()

from django.core.exceptions import ValidationError  # noqa: E402
from django.db import transaction  # noqa: E402

from kube.apply import call_with_retry  # noqa: E402
from kube.client import build_api_client  # noqa: E402
from kube.errors import K8sError  # noqa: E402
from quotas.decisions import approve_request, submit_request  # noqa: E402
from quotas.direct import set_team_quota  # noqa: E402
from quotas.exceptions import DomainError as QuotaDomainError  # noqa: E402
from quotas.lines import LineInput  # noqa: E402
from quotas.models import Namespace, Team, TeamQuota  # noqa: E402
from quotas.signals import quota_changed  # noqa: E402
from scheduling import services, sync  # noqa: E402
from scheduling.choices import SyncAction, SyncStatus  # noqa: E402
from scheduling.domain.render import LABEL_MANAGED_BY, LABEL_TEAM  # noqa: E402
from scheduling.exceptions import DomainError  # noqa: E402
from scheduling.models import SyncRun  # noqa: E402
from scheduling.sync import planning, writers  # noqa: E402
from tests.kubeapi import volcano  # noqa: E402
from tests.kubeapi.server import FakeKubeApi  # noqa: E402

GPU = "nvidia.com/gpu"
MANAGED_KINDS = ("Namespace", "ResourceQuota", "LimitRange", "Role", "RoleBinding", "Queue")
FAULTS = ("500", "429", "timeout", "409", "reset", "503")
CYCLE = (*FAULTS[:3], "restart", *FAULTS[3:])
VOLCANO = "scheduling.volcano.sh/v1beta1"
RBAC = "rbac.authorization.k8s.io/v1"


# --------------------------------------------------------------------------- look-alikes


def _obj(kind: str, name: str, namespace: str | None = None, labels=None, **rest) -> dict:
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "metadata": metadata, **rest}


def lookalikes() -> list[dict]:
    """Objects Fairshare must never delete or change: none carries ``managed-by: fairshare``."""
    helm = {LABEL_MANAGED_BY: "helm"}
    binding = {
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "admin",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
    }
    gpus = {"hard": {f"requests.{GPU}": "4"}}
    return [
        _obj("Namespace", "team-a-scratch", labels={LABEL_TEAM: "team-a"}),
        _obj("Namespace", "ml-platform", labels=helm),
        # Our names, in namespaces we do not manage.
        _obj("ResourceQuota", "fairshare", "default", spec=gpus),
        _obj("ResourceQuota", "fairshare", "kube-system", labels=helm, spec=gpus),
        _obj("LimitRange", "fairshare", "default", spec={"limits": [{"type": "Container"}]}),
        _obj("Role", "fairshare-volcano", "default", apiVersion=RBAC, rules=[]),
        _obj("RoleBinding", "fairshare-lead", "default", apiVersion=RBAC, **binding),
        _obj("RoleBinding", "fairshare-lead", "ml-platform", apiVersion=RBAC, **binding),
        # Other names, inside namespaces we do manage.
        _obj("ResourceQuota", "gpu-burst", "team-a-ml", labels={LABEL_TEAM: "team-a"}, spec=gpus),
        _obj("RoleBinding", "ci-bot", "team-b-ml", labels=helm, apiVersion=RBAC, **binding),
        # Cluster-scoped.
        _obj("PriorityClass", "soak-critical", apiVersion="scheduling.k8s.io/v1", value=2000000),
        _obj(
            "PriorityClass",
            "experiment-legacy",
            labels={LABEL_TEAM: "team-a"},
            apiVersion="scheduling.k8s.io/v1",
            value=1000,
        ),
        _obj("Queue", "default", apiVersion=VOLCANO, spec={"weight": 1, "reclaimable": True}),
        _obj(
            "Queue",
            "team-z",
            labels={LABEL_MANAGED_BY: "fairshare-legacy", LABEL_TEAM: "team-z"},
            apiVersion=VOLCANO,
            spec={"weight": 2},
        ),
    ]


def _key(obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace") or "", meta["name"])


def _content(obj: dict) -> dict:
    """What an owner cares about: labels, annotations and every non-metadata field."""
    meta = obj.get("metadata") or {}
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion")}
    return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations"), **rest}


# --------------------------------------------------------------------------- the report


@dataclass
class SoakReport:
    runs: int = 0
    statuses: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)  # injected (fired) by type
    restarts: Counter = field(default_factory=Counter)
    changes: Counter = field(default_factory=Counter)  # tenancy changes by type
    perturbations: Counter = field(default_factory=Counter)  # cluster edits behind our back
    raised: Counter = field(default_factory=Counter)  # exceptions run_sync re-raised, by type
    failed_items: int = 0
    retries: int = 0  # calls repeated by call_with_retry (transient errors and conflicts)
    backoff_requested: float = 0.0
    deletes: int = 0
    lookalikes_checked: int = 0
    lookalikes_waiting: int = 0  # lost with the server's state, their namespace not back yet
    final: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        def counter(c: Counter) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"

        return [
            f"runs: {self.runs} ({counter(self.statuses)}) + final sync, steady-state sync, "
            "dry run",
            f"faults injected: {sum(self.faults.values())} ({counter(self.faults)})",
            f"server restarts: {counter(self.restarts)}",
            f"tenancy changes: {counter(self.changes)}",
            f"cluster edits behind Fairshare's back: {counter(self.perturbations)}",
            f"runs that raised: {counter(self.raised)}",
            f"failed items: {self.failed_items}; retries: {self.retries} "
            f"(back-off asked for: {self.backoff_requested:.1f} s)",
            f"deletes served: {self.deletes}, all of labelled objects: "
            f"{not any('unlabelled' in p for p in self.problems)}",
            f"look-alikes intact: {self.lookalikes_checked} "
            f"(+{self.lookalikes_waiting} lost in a restart, namespace not recreated)",
            f"final: {self.final}",
            f"wall time: {self.seconds:.1f} s",
            f"problems: {len(self.problems)}",
            *(f"  - {p}" for p in self.problems),
        ]


# --------------------------------------------------------------------------- the soak


class Soak:
    """Drive ``runs`` syncs against ``server`` with faults and tenancy changes (module docstring).

    ``actor`` is a site admin (approves requests, sets quotas). ``midrun_restart_rate`` > 0
    restarts the server from a timer thread during some runs (timing-dependent: the soak
    script uses it, the short test does not). The database must hold a tenancy with capacity
    (``tests.base.make_cast()``); the soak does not flush anything.
    """

    def __init__(
        self,
        server: FakeKubeApi,
        *,
        actor: Any,
        seed: int = 1,
        runs: int = 120,
        fault_rate: float = 0.7,
        restart_rate: float = 0.08,
        midrun_restart_rate: float = 0.0,
        change_rate: float = 0.35,
        perturb_rate: float = 0.5,
        read_timeout: float = 1.0,
        sleep_cap: float = 0.02,
    ) -> None:
        self.server = server
        self.actor = actor
        self.rng = random.Random(seed)
        self.runs = runs
        self.fault_rate = fault_rate
        self.restart_rate = restart_rate
        self.midrun_restart_rate = midrun_restart_rate
        self.change_rate = change_rate
        self.perturb_rate = perturb_rate
        self.read_timeout = read_timeout
        self.sleep_cap = sleep_cap
        self.report = SoakReport()
        self.lookalikes = {_key(o): o for o in lookalikes()}
        self.waiting: set[tuple[str, str, str]] = set()  # look-alikes lost with the state
        self.deleted: list[tuple[str, str, str, bool]] = []
        self.run_ids: list[int] = []
        self._calls = 0
        self._attempts = 0
        self._cycle = 0

    # ------------------------------------------------------------------ seams

    def _sleep(self, seconds: float) -> None:
        self.report.backoff_requested += seconds
        time.sleep(min(seconds, self.sleep_cap))

    def _call_with_retry(self, fn, **kwargs):
        self._calls += 1

        def counted():
            self._attempts += 1
            return fn()

        return call_with_retry(counted, sleep=self._sleep, **kwargs)

    def _record_delete(self, original, kind, ns, name, dry_run):
        obj = self.server.store.get(kind.kind, ns, name)
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        managed = obj is None or labels.get(LABEL_MANAGED_BY) == "fairshare"
        if not dry_run:
            self.deleted.append((kind.kind, ns, name, managed))
        return original(kind, ns, name, dry_run)

    @contextlib.contextmanager
    def _seams(self) -> Iterator[None]:
        """Fast back-off in the sync engine, DELETEs recorded, no Celery chains on changes."""
        original_retry = writers.call_with_retry  # the writers' and the LISTs' (planning)
        original_delete = self.server._delete
        writers.call_with_retry = planning.call_with_retry = self._call_with_retry
        self.server._delete = functools.partial(self._record_delete, original_delete)
        disconnected = quota_changed.disconnect(dispatch_uid="scheduling.sync_on_quota")
        try:
            yield
        finally:
            writers.call_with_retry = planning.call_with_retry = original_retry
            del self.server._delete  # back to the class's method
            if disconnected:
                from scheduling import receivers

                quota_changed.connect(
                    receivers.on_quota_changed, dispatch_uid="scheduling.sync_on_quota"
                )

    # ------------------------------------------------------------------ look-alikes

    def _seed_lookalikes(self, keys) -> None:
        for key in sorted(keys):
            ns = key[1]
            if ns and self.server.get("Namespace", ns) is None:
                self.waiting.add(key)  # back when (if) its namespace is
                continue
            self.server.put_object(self.lookalikes[key])
            self.waiting.discard(key)

    def _state_lost(self) -> None:
        self.report.restarts["lost state"] += 1
        self._seed_lookalikes(self.lookalikes)  # their owners recreate them

    # ------------------------------------------------------------------ faults

    def _inject(self) -> list[tuple[str, Any]]:
        """Fault rules for the next run. The first one cycles through the types (and a server
        restart) and fires on the run's first request (its first write, for a 409), so that
        even a short soak sees every type and both outcomes (a failed item, a failed run);
        the others are random in verb, kind and shape."""
        rng = self.rng
        if rng.random() >= self.fault_rate:
            return []
        fault = CYCLE[self._cycle % len(CYCLE)]
        self._cycle += 1
        if fault == "restart":  # alternately losing the state and keeping it
            self._restart(lose_state=self._cycle % (2 * len(CYCLE)) <= len(CYCLE))
            return []
        if fault == "409":  # twice: the retry conflicts too, and the item fails
            self._stray()  # something to write: its prune
            first = self.server.fault(409, verb="write", times=2)
        else:
            # Every other pass through the cycle the fault outlasts the retries of the run's
            # first LIST, and the whole run fails (no items). Timeouts are slow: once only.
            outlast = (self._cycle - 1) // len(CYCLE) % 2 == 1 and fault != "timeout"
            times = planning.RETRY_ATTEMPTS if outlast else 1
            first = self._rule(fault, verb=None, kind=None, times=times)
        rules = [(fault, first)]
        for _ in range(rng.choice((0, 0, 1, 2))):
            fault = rng.choice(FAULTS)
            rules.append((fault, self._rule(fault)))
        if rng.random() < 0.04:
            # A write outage: every write gets no answer; the run gives up after three objects.
            rules.append(("reset", self.server.fault("reset", verb="write", times=None)))
        return rules

    def _rule(self, fault: str, **fixed: Any):
        rng = self.rng
        match: dict[str, Any] = {}
        if fault == "409":
            match["verb"] = rng.choice(("apply", "apply", "delete"))
        else:
            match["verb"] = rng.choice(("apply", "apply", "list", "delete", "write", None))
        if rng.random() < 0.5:
            match["kind"] = rng.choice(MANAGED_KINDS)
        shape = rng.choice(("once", "few", "flaky"))
        if fault == "timeout":  # each one costs a read timeout: keep them rare
            match["times"] = rng.choice((1, 1, 2))
        elif shape == "once":
            match["times"] = 1
        elif shape == "few":
            match["times"] = rng.randint(2, 6)
        else:
            match["times"] = None
            match["probability"] = rng.uniform(0.05, 0.3)
        match.update(fixed)
        if fault == "429":
            match["retry_after"] = rng.choice((1, 2, 5))
        if fault == "timeout":
            return self.server.fault("timeout", delay=self.read_timeout + 0.5, **match)
        if fault == "reset":
            return self.server.fault("reset", **match)
        return self.server.fault(int(fault), **match)

    def _restart(self, *, lose_state: bool) -> None:
        self.server.restart(lose_state=lose_state)
        if lose_state:
            self._state_lost()
        else:
            self.report.restarts["kept state"] += 1

    # ------------------------------------------------------------------ tenancy changes

    def _change(self) -> None:
        rng = self.rng
        teams = list(Team.objects.order_by("slug"))
        leaves = [t for t in teams if t.active and not any(c.parent_id == t.pk for c in teams)]
        what = rng.choice(("approve", "approve", "set-quota", "set-quota", "toggle", "namespace"))
        try:
            with transaction.atomic():
                if what == "approve" and leaves:
                    team = rng.choice(leaves)
                    g, limit = self._amounts()
                    request = submit_request(
                        team=team,
                        requester=self.actor,
                        lines=[LineInput(GPU, g, limit)],
                        justification="soak",
                    )
                    approve_request(request.pk, approver=self.actor, note="soak")
                elif what == "set-quota" and leaves:
                    team = rng.choice(leaves)
                    if rng.random() < 0.5:
                        g, limit = self._amounts()
                        set_team_quota(team, GPU, guarantee=g, limit=limit, actor=self.actor)
                    else:
                        cores = rng.randint(0, 100)
                        set_team_quota(
                            team, "cpu", guarantee=cores, limit=cores * 2, actor=self.actor
                        )
                elif what == "toggle":
                    inactive = [t for t in teams if not t.active]
                    team = rng.choice(inactive if inactive and rng.random() < 0.6 else teams)
                    Team.objects.filter(pk=team.pk).update(active=not team.active)
                    what = "reactivate" if not team.active else "deactivate"
                elif what == "namespace":
                    team = rng.choice(teams)
                    n = Namespace.objects.count()
                    Namespace.objects.create(name=f"{team.slug}-soak{n}", team=team)
                else:
                    return
                services.compute_shares(trigger="soak")
        except (ValidationError, QuotaDomainError, DomainError) as e:
            self.report.changes[f"{what} refused ({type(e).__name__})"] += 1
            return
        self.report.changes[what] += 1

    def _perturb(self) -> None:
        """Someone works on the cluster behind Fairshare's back: edits, deletes, leftovers."""
        rng = self.rng

        def queues() -> dict:
            return {q["metadata"]["name"]: q for q in self.server.objects("Queue")}

        for _ in range(rng.randint(1, 4)):
            what = rng.choice(("drift", "drift", "vanish", "stray"))
            if what == "stray":
                self._stray()
                continue
            kind = rng.choice(("Queue", "ResourceQuota", "RoleBinding", "LimitRange"))
            ours = [
                o
                for o in self.server.objects(kind)
                if (o["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == "fairshare"
            ]
            if not ours:
                continue
            obj = rng.choice(ours)
            if what == "vanish":
                if kind == "Queue" and volcano.children_of(obj["metadata"]["name"], queues()):
                    # Volcano's webhook refuses to delete a queue with children (kubectl too).
                    continue
                self.server.store.remove(kind, *_key(obj)[1:])
            elif kind == "Queue":
                obj["spec"]["weight"] = obj["spec"].get("weight", 1) + 7
                self.server.put_object(obj)
            elif kind == "ResourceQuota":
                obj["spec"]["hard"] = {**obj["spec"].get("hard", {}), f"requests.{GPU}": "999"}
                self.server.put_object(obj)
            elif kind == "RoleBinding":
                obj["subjects"] = [*obj.get("subjects", []), {"kind": "User", "name": "mallory"}]
                self.server.put_object(obj)
            else:
                obj["spec"] = {"limits": []}
                self.server.put_object(obj)
            self.report.perturbations[what] += 1

    def _stray(self) -> None:
        """A labelled object Fairshare does not want (a leftover): the next sync prunes it."""
        n = self.report.perturbations["stray"]
        labels = {LABEL_MANAGED_BY: "fairshare", LABEL_TEAM: "team-gone"}
        namespaces = [
            o["metadata"]["name"]
            for o in self.server.objects("Namespace")
            if (o["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == "fairshare"
        ]
        if namespaces and self.rng.random() < 0.5:
            ns = self.rng.choice(namespaces)
            binding = {"roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": []}
            self.server.put_object(
                _obj("RoleBinding", f"fairshare-stray-{n}", ns, labels, apiVersion=RBAC, **binding)
            )
        else:
            self.server.put_object(
                _obj("Queue", f"stray-{n}", None, labels, apiVersion=VOLCANO, spec={"weight": 1})
            )
        self.report.perturbations["stray"] += 1

    def _amounts(self) -> tuple[str, str]:
        g = self.rng.randint(0, 30)
        return str(g), str(g + self.rng.randint(0, 30))

    # ------------------------------------------------------------------ runs

    def _sync(self, api_client: Any, *, dry_run: bool = False, trigger: str = "soak") -> SyncRun:
        run = sync.create_run(dry_run=dry_run, trigger=trigger)
        self.run_ids.append(run.pk)
        try:
            sync.run_sync(run.pk, api_client=api_client)
        except K8sError as e:
            self.report.raised[type(e).__name__] += 1
        except Exception as e:  # anything else is a bug the soak should surface
            self.report.raised[type(e).__name__] += 1
            self.report.problems.append(f"run #{run.pk} raised {type(e).__name__}: {e}")
        run.refresh_from_db()
        return run

    def _one_run(self, api_client: Any) -> None:
        rng = self.rng
        if rng.random() < self.restart_rate:
            self._restart(lose_state=rng.random() < 0.5)
        if rng.random() < self.change_rate:
            self._change()
        if rng.random() < self.perturb_rate:
            self._perturb()
        rules = self._inject()
        timer = None
        if rng.random() < self.midrun_restart_rate:
            lose = rng.random() < 0.5
            timer = threading.Timer(
                rng.uniform(0.01, 0.3), self.server.restart, kwargs={"lose_state": lose}
            )
            timer.start()
        try:
            run = self._sync(api_client)
        finally:
            if timer is not None:
                timer.join()
                if lose:
                    self._state_lost()
                else:
                    self.report.restarts["kept state"] += 1
                self.report.restarts["mid-run"] += 1
        for fault, rule in rules:
            self.report.faults[fault] += rule.fired
        self.server.clear_faults()
        self._seed_lookalikes(set(self.waiting))
        self.report.runs += 1
        self.report.statuses[run.status] += 1

    def run(self) -> SoakReport:
        started = time.monotonic()
        api_client = build_api_client(
            "kubeconfig",
            kubeconfig=self.server.kubeconfig_path,
            timeout=(1.0, self.read_timeout),
        )
        try:
            with self._seams():
                self._seed_lookalikes(self.lookalikes)
                for _ in range(self.runs):
                    self._one_run(api_client)
                self.server.clear_faults()
                self._finish(api_client)
        finally:
            api_client.close()
            self.server.clear_faults()
        self._check_history()
        self._check_deletes()
        self._check_lookalikes()
        self.report.retries = self._attempts - self._calls
        self.report.seconds = time.monotonic() - started
        return self.report

    # ------------------------------------------------------------------ end checks

    def _finish(self, api_client: Any) -> None:
        problems = self.report.problems
        converge = self._sync(api_client, trigger="soak-final")
        self._seed_lookalikes(set(self.waiting))
        self.server.reset_counts()
        steady = self._sync(api_client, trigger="soak-steady")
        writes = self.server.writes()
        dry = self._sync(api_client, dry_run=True, trigger="soak-check")
        planned = Counter(dry.items.values_list("action", flat=True))
        self.report.final = {
            "converge": f"{converge.status} ({converge.created_count} created, "
            f"{converge.updated_count} updated, {converge.pruned_count} pruned)",
            "steady writes": writes,
            "dry-run plan": dict(planned),
        }
        if converge.status != SyncStatus.SUCCEEDED:
            problems.append(f"the fault-free sync did not succeed: {converge.error}")
        if steady.status != SyncStatus.SUCCEEDED or writes:
            problems.append(f"the steady-state sync was {steady.status} with {writes} writes")
        if dry.status != SyncStatus.SUCCEEDED or set(planned) != {SyncAction.UNCHANGED}:
            problems.append(f"the cluster differs from the desired state: {dict(planned)}")
        # The managed objects in the cluster are exactly the desired ones, plus namespaces of
        # teams no longer desired (kept: namespaces are never pruned).
        desired = set(dry.items.values_list("kind", "namespace", "name"))
        managed = {
            _key(obj)
            for kind in (*MANAGED_KINDS, "PriorityClass")
            for obj in self.server.objects(kind)
            if (obj["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == "fairshare"
        }
        if desired - managed or {k for k in managed - desired if k[0] != "Namespace"}:
            problems.append(
                f"missing in the cluster: {sorted(desired - managed)}; "
                f"not desired: {sorted(managed - desired)}"
            )

    def _check_history(self) -> None:
        problems = self.report.problems
        runs = SyncRun.objects.filter(pk__in=self.run_ids).prefetch_related("items")
        for run in runs:
            items = list(run.items.all())
            failed = [i for i in items if i.action == SyncAction.FAILED]
            self.report.failed_items += len(failed)
            if run.status in (SyncStatus.QUEUED, SyncStatus.RUNNING):
                problems.append(f"run #{run.pk} was left {run.status}")
            if run.finished_at is None:
                problems.append(f"run #{run.pk} has no finished_at")
            if run.status == SyncStatus.FAILED and not run.error:
                problems.append(f"run #{run.pk} failed without an error")
            if run.status == SyncStatus.SUCCEEDED and failed:
                problems.append(f"run #{run.pk} succeeded with {len(failed)} failed items")
            if run.failed_count != len(failed):
                problems.append(f"run #{run.pk}: failed_count {run.failed_count} != {len(failed)}")
            for i in failed:
                if not i.error:
                    problems.append(f"run #{run.pk}: failed item {i.kind} {i.name} has no error")
            if len(problems) > 50:
                break

    def _check_deletes(self) -> None:
        self.report.deletes = len(self.deleted)
        for kind, ns, name, managed in self.deleted:
            if not managed:
                self.report.problems.append(f"deleted unlabelled {kind} {ns}/{name}")
            if kind == "Namespace":
                self.report.problems.append(f"deleted a Namespace {name} (never pruned)")

    def _check_lookalikes(self) -> None:
        for key, obj in sorted(self.lookalikes.items()):
            if key in self.waiting:
                self.report.lookalikes_waiting += 1
                continue
            kind, ns, name = key
            live = self.server.get(kind, name, ns or None)
            if live is None:
                self.report.problems.append(f"look-alike {kind} {ns}/{name} is gone")
            elif _content(live) != _content({**obj, "kind": kind}):
                self.report.problems.append(f"look-alike {kind} {ns}/{name} was changed")
            else:
                self.report.lookalikes_checked += 1


# --------------------------------------------------------------------------- the script


def add_teams() -> None:
    """Two more teams beside the cast's: a root-level one with CPU quota, and a third child."""
    from quotas.models import PriorityTier

    tier = PriorityTier.objects.get(name="experiment")
    dept = Team.objects.get(slug="dept-x")
    team_c = Team.objects.create(slug="team-c", name="Team C", weight=2, tier=tier)
    team_d = Team.objects.create(slug="team-d", name="Team D", parent=dept, weight=1, tier=tier)
    for team in (team_c, team_d):
        Namespace.objects.create(name=f"{team.slug}-ml", team=team)
        TeamQuota.objects.create(team=team, resource=GPU, guarantee=Decimal(5), limit=Decimal(10))
    Namespace.objects.create(name="team-c-dev", team=team_c, share=2)
    TeamQuota.objects.create(team=team_c, resource="cpu", guarantee=Decimal(50), limit=None)


def main(argv: list[str] | None = None) -> int:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from tests.base import make_cast

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    # Failed runs log their tracebacks at ERROR; the report below is the output.
    logging.getLogger("scheduling").setLevel(logging.CRITICAL)

    db = settings.DATABASES["default"]
    if "soak" not in str(db["NAME"]):
        sys.exit(f"refusing to flush database {db['NAME']!r}: its name must contain 'soak'")
    print(f"database: {db['ENGINE']} {db['NAME']}; sync lock: {sync.lock_url() or 'database'}")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    make_cast()
    add_teams()
    services.compute_shares(trigger="soak")

    server = FakeKubeApi(seed=args.seed).start()
    server.reset()
    try:
        soak = Soak(
            server,
            actor=User.objects.get(username="root"),
            seed=args.seed,
            runs=args.runs,
            midrun_restart_rate=0.05,
        )
        report = soak.run()
    finally:
        server.close()
    print("\n".join(report.lines()))
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
