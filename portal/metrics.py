"""Prometheus metrics, read from the database at scrape time: the /metrics exposition.

It composes the apps' sections (``monitoring.metrics.UsageMetrics``: tenancy and usage;
``scheduling.metrics.ShareMetrics``: shares and syncs) in one fixed order.
:class:`FairshareCollector` is a custom ``prometheus_client`` collector registered on its own
``CollectorRegistry`` (no process/GC metrics of whichever worker served the scrape: the numbers
are the cluster's, not the web process's). A scrape runs a constant number of queries (17),
whatever the number of teams, resources or GPUs. Amounts are in base units (cores, bytes,
devices); ``team="unassigned"`` collects namespaces no team owns. /metrics is an operator
endpoint (``FAIRSHARE_METRICS_TOKEN`` or loopback: an admin credential), so it carries every team
whatever ``FAIRSHARE_SHARE_VISIBILITY`` says (scheduling.visibility); dashboards built on it for
teams should filter by team when visibility is ``own``.

Metrics (gauges):

* ``fairshare_quota_guarantee{team,resource}``, ``fairshare_quota_limit{team,resource}``
  (teams without a ceiling have no limit series)
* ``fairshare_allocated{team,resource}``, ``fairshare_pending{team,resource}``: the latest
  collection; ``fairshare_usage_collected_timestamp_seconds``
* ``fairshare_cluster_capacity{resource}``: the latest capacity snapshot
* ``fairshare_pending_workloads{team,queue}``, ``fairshare_pending_workload_gpus{team,queue}``:
  waiting workloads (gangs, Volcano Jobs, owner groups) of the latest collection and the GPUs
  they still need admitted (a waiting gang: all of it); ``queue`` is "" outside Volcano queues
* ``fairshare_dominant_share{team,resource}`` (resource = the dominant one),
  ``fairshare_fair_share{team}``, ``fairshare_fair_allocation{team,resource}``: the latest
  ShareComputation, if any; ``fairshare_shares_computed_timestamp_seconds``
* ``fairshare_shares_stale``: 1 while the fair shares are stale (a computation failed after the
  latest successful one, ``scheduling.health.share_health``), else 0;
  ``fairshare_share_failures``: failed computations since the latest success;
  ``fairshare_shares_stale_since_timestamp_seconds`` (only while stale: the first failure) and
  ``fairshare_shares_last_success_timestamp_seconds`` (once one succeeded)
* Per GPU, the newest sample of each GPU that reported within the collection window
  (:func:`monitoring.gpu_alerts.gpu_reporting_window`, two minutes by default), labelled
  ``node``, ``gpu`` (the index), ``uuid``, ``model``, ``namespace`` and ``team``:
  ``fairshare_gpu_device_utilization_percent``, ``fairshare_gpu_device_memory_used_percent``
  (memory used ÷ total × 100) and ``fairshare_gpu_device_temperature_celsius``. A GPU no pod
  uses has empty ``namespace`` and ``team``; a pod in a namespace no team owns has
  ``team="unassigned"``. A value the GPU does not report (MIG: no utilization) has no series.
  One series per GPU and metric: 1,000 GPUs are 1,000 series each (docs/operations.md). The
  PrometheusRule's recording rules map these, or DCGM exporter's ``DCGM_FI_DEV_GPU_UTIL``,
  ``DCGM_FI_DEV_FB_USED``/``FREE`` and ``DCGM_FI_DEV_GPU_TEMP``, onto the names its alerts read.
* Per team, over the same samples: ``fairshare_gpu_utilization_percent{team}`` (mean),
  ``fairshare_gpus_reporting{team}``, ``fairshare_gpu_memory_used_max_percent{team}`` and
  ``fairshare_gpu_temperature_max_celsius{team}`` (the fullest and the hottest GPU); GPUs no pod
  uses count under ``unassigned``
* ``fairshare_team_info{team,name,leads,url}`` (1 per active team; ``leads``: the active leads'
  emails, or usernames where no email is set, comma-separated; ``url``: the team page) and
  ``fairshare_namespace_info{namespace,team}``: what the alerts' annotations and the DCGM
  recording rules join on (``deploy/monitoring/prometheusrule.yaml``)
* ``fairshare_idle_gpus{team}``: GPUs in open idle alerts
* ``fairshare_budget_hours{team,resource}``, ``fairshare_budget_allocated_hours{team,resource}``:
  budget use this month (``monitoring.budgets.budget_use``: allocated hours up to the end of
  the newest rolled-up hour, ``fairshare_budget_cutoff_timestamp_seconds``), the figure the
  pages and the API show; ``fairshare_budget_used_hours`` is its former name (same value)
* ``fairshare_sync_success``: 1 if the newest finished (non-dry-run) sync succeeded, else 0;
  ``fairshare_sync_last_finished_timestamp_seconds``, ``fairshare_sync_age_seconds``,
  ``fairshare_sync_last_success_timestamp_seconds``
* ``fairshare_transition_waiting{team,kind}``: 1 per team change waiting for workloads to
  finish (``quotas.transitions``); ``fairshare_transition_blocking_workloads{team,kind}``: the
  PodGroups it waits for; ``fairshare_transition_waiting_seconds{team,kind}``: since when
"""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from monitoring.metrics import UsageMetrics
from scheduling.metrics import ShareMetrics


class FairshareCollector(Collector):
    """Yield Fairshare's gauges from the database; ``now`` is injectable for tests."""

    def __init__(self, now=None):
        self._now = now

    def collect(self) -> Iterator[Metric]:
        now = self._now() if self._now else timezone.now()
        usage, shares = UsageMetrics(), ShareMetrics()
        yield from usage.quotas()
        yield from usage.usage()
        yield from usage.capacity()
        yield from usage.workloads()
        yield from shares.shares()
        yield from shares.share_health()
        yield from usage.gpus(now)
        yield from usage.teams()
        yield from usage.idle()
        yield from usage.budgets(now)
        yield from shares.sync(now)
        yield from usage.transitions(now)


def build_registry(now=None) -> CollectorRegistry:
    """A fresh registry holding only :class:`FairshareCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairshareCollector(now=now))
    return registry
