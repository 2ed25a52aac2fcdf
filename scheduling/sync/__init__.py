"""Cluster sync: make Kubernetes match the desired state, and record what was done.

The package, one module per job: ``runs`` (starting a run, reaping stale ones), ``flight``
(single flight and follow-ups), ``planning`` (scope, live state, desired manifests, drift),
``writers`` (applying the plan), ``recording`` (items, counters, audit), ``progress`` (the
heartbeat) and ``run`` (``run_sync``, which strings them together). This module is their index:
the names below are the interface the rest of Fairshare uses.

``start_sync()`` creates a queued :class:`~scheduling.models.SyncRun` and enqueues the
``sync_cluster`` task after commit (the UI and API answer 202 with the run). ``run_sync()`` is
what the task (and ``manage.py sync``) calls: plan, apply, record.

How one run goes (``run_sync``)
===============================

1. Stale runs are reaped: a run RUNNING whose heartbeat is older than
   ``FAIRSHARE_SYNC_STALE_AFTER`` (a killed worker), or QUEUED for longer than that (a lost
   message), is marked FAILED with a "worker lost" / "never started" error.
2. The run is claimed with a conditional update (``queued → running``); a run already claimed by
   another worker (a redelivered message) is left alone.
3. Single flight that coalesces: one sync at a time per installation. With Redis
   (``REDIS_URL``, or a ``redis://`` Celery broker) a redis-py ``Lock`` is taken without
   blocking *before* the claim and extended on every heartbeat; without Redis (the embedded
   demo) the claim itself is the lock: claims are serialised (a PostgreSQL advisory transaction
   lock; SQLite serialises writers already) and a run that finds another RUNNING run with a
   fresh heartbeat does not start. A Redis lock held by a run that is finished (reaped in
   step 1: its worker died holding it) is abandoned and taken over.
   **A request that finds the lock taken is never dropped nor failed.** Its row stays QUEUED
   ("Waiting: sync #N is running") — that row *is* the dirty flag, in the database, so it
   works across workers and outlives any of them. The run that holds the lock, when it
   finishes (whatever the outcome), enqueues the oldest pending run; the run that claims next
   merges every pending sync into itself (they become MERGED, "Included in sync #M", with
   ``merged_into``) and plans the union of their scopes. So a burst of requests during one
   sync gives exactly one follow-up, which reads the database after all of them were queued.
   If the holder's worker dies, the rows stay QUEUED and the next run to take the lock (the
   next trigger, or the beat) merges them.
4. Desired state: ``desired.build_cluster_spec()`` → ``render()``. Each manifest gets the
   annotation ``fairshare.io/last-applied`` (the manifest itself, as compact JSON) so the next
   run can tell drift from a change of the desired state.
5. Live state: one paginated LIST per managed kind (label ``app.kubernetes.io/managed-by=
   fairshare``), each retried as a whole on transient errors.
6. ``plan()`` with quantities compared semantically; then every change is applied in plan order:
   create/update by server-side apply (field manager ``fairshare``; an update touching an
   immutable field — a RoleBinding's roleRef, a PriorityClass value — is delete + apply),
   prune by delete (already gone counts as pruned), unchanged objects are not touched, so a
   steady-state sync issues zero writes. Transient errors are retried per object by
   ``call_with_retry`` (honouring Retry-After). A write an admission webhook denied is tried
   again after the rest of its wave, bounded with backoff (Volcano's webhooks judge against a
   cache that can lag the writes just made). A Namespace is routed to a Queue the run creates
   only once that Queue is Open (one LIST per poll, bounded); see ``_apply_wave``.
   Before the desired state is read, waiting transitions (``quotas.transitions``) that the
   live PodGroups no longer block are completed, so the run renders what the cluster may take
   on now.
7. One SyncItem per object (unchanged ones too), the run's counters and status, and one
   ``sync`` AuditEvent (for a non-dry run that changed something) are written in a single
   transaction at the end; on PostgreSQL the items go in with one ``COPY``.

Outcomes (consistent everywhere):

* every object applied (or unchanged) → SUCCEEDED;
* some objects failed (422, 500 after retries, timeout, conflict) → those items are ``failed``
  with the error, all the others are still applied, and the run is **FAILED with its items**
  (``error`` says how many failed); the next run re-plans from the live state and retries them;
* the run could not be carried out at all — Kubernetes disabled or misconfigured, the API server
  unreachable (at LIST time, or three objects in a row without an answer while applying), a
  render error — → FAILED with the error and **no items** (nothing half-written); the exception
  is re-raised for the caller (the task retries transient ones).

Drift: an update of an object carrying our last-applied annotation whose live owned fields differ
from that annotation — someone edited it behind Fairshare's back. The item is flagged, the
drifted fields are listed in its diff, the run counts it, and the apply corrects it. An update
caused by a change of the desired state (a quota approval) is not drift.

Dry run: the same LIST and the same plan, nothing applied (not even ``dryRun=All``: a
server-side dry run of objects inside a namespace that does not exist yet would fail, and the
plan is the point). Items carry the planned action.

Modes (``FAIRSHARE_CLUSTER``): ``kubeconfig[:PATH]`` and ``in-cluster`` talk to the API server;
``disabled`` fails the run with a clear error; ``snapshot:PATH`` (the demo) has no API server:
the run becomes a dry run ("Plan only — no cluster connected") planned against the managed
objects in the snapshot file (what an earlier sync left there, as ``kubectl get -o json``
dumps them), so drift, updates and prunes show as they would on a cluster; nothing is written.
Like GitOps, the manifests are what ``manage.py export_manifests`` writes for a tool to apply.

Volcano Queues are pruned by a plain delete: the v1beta1 Queue has no ``spec.state`` (``state``
is status, set by Volcano's controller), and Volcano's admission webhook (≥ 1.15) refuses to
delete only the ``default``/``root`` queues (which the renderer never produces) and, for
hierarchical queues, a parent before its children — the plan prunes children first.
"""

from scheduling.exceptions import SyncError
from scheduling.sync.flight import lock_key, lock_url
from scheduling.sync.planning import (
    LAST_APPLIED_ANNOTATION,
    PLAN_ONLY,
    build_client,
    cluster_mode,
    drifted_fields,
    is_plan_only,
)
from scheduling.sync.run import iter_changes, prune_sync_history, run_sync
from scheduling.sync.runs import SYNC_TASK, create_run, reap_stale_runs, start_sync

__all__ = [
    "LAST_APPLIED_ANNOTATION",
    "PLAN_ONLY",
    "SYNC_TASK",
    "SyncError",
    "build_client",
    "cluster_mode",
    "create_run",
    "drifted_fields",
    "is_plan_only",
    "iter_changes",
    "lock_key",
    "lock_url",
    "prune_sync_history",
    "reap_stale_runs",
    "run_sync",
    "start_sync",
]
