"""Celery tasks of the quotas app: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from quotas import grants


@shared_task(name="quotas.tasks.expire_temporary_quota")
def expire_temporary_quota() -> dict:
    """Open and close temporary grants' windows (beat, every minute). Idempotent."""
    result = grants.expire_temporary_quota()
    return {"activated": result.activated, "expired": result.expired, "failed": result.failed}


@shared_task(name="quotas.tasks.remind_ending_grants")
def remind_ending_grants() -> dict:
    """Remind teams of temporary grants ending within FAIRSHARE_GRANT_REMINDER_DAYS (beat,
    hourly). Idempotent: one reminder per grant."""
    return {"reminded": grants.remind_ending_grants()}


@shared_task(name="quotas.tasks.ping")
def ping(value: int) -> dict:
    """Round-trip check used by health checks and the worker integration test."""
    from quotas.models import Team

    return {"echo": value, "teams": Team.objects.count()}
