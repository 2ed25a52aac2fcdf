from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Fair share and cluster sync"

    def ready(self) -> None:
        from monitoring.workloads import provide_fair_allocations
        from quotas.signals import membership_changed, quota_changed
        from scheduling import (
            receivers,
            tasks,  # noqa: F401
        )
        from scheduling.shares import latest_fair_allocations

        # Importing the task module registers its Celery tasks in every process, not only
        # the worker (whose autodiscovery runs at start-up): the web process enqueues
        # ``sync_cluster`` by name (scheduling.sync.runs.sync_task) and would otherwise raise
        # NotRegistered.

        # Workloads waiting "over the fair share" are judged against the latest shares
        # (monitoring builds below scheduling, so it is told where to read them).
        provide_fair_allocations(latest_fair_allocations)
        quota_changed.connect(receivers.on_quota_changed, dispatch_uid="scheduling.sync_on_quota")
        membership_changed.connect(
            receivers.on_membership_changed, dispatch_uid="scheduling.sync_on_membership"
        )
