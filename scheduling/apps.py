from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Fair share and cluster sync"

    def ready(self) -> None:
        from quotas.signals import membership_changed, quota_changed
        from scheduling import (
            receivers,
            tasks,  # noqa: F401
        )

        # Importing the task module registers its Celery tasks in every process, not only
        # the worker (whose autodiscovery runs at start-up): the web process enqueues
        # ``sync_cluster`` by name (scheduling.sync._sync_task) and would otherwise raise
        # NotRegistered.

        quota_changed.connect(receivers.on_quota_changed, dispatch_uid="scheduling.sync_on_quota")
        membership_changed.connect(
            receivers.on_membership_changed, dispatch_uid="scheduling.sync_on_membership"
        )
