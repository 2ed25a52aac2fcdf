"""Template context shared by every page."""

from __future__ import annotations


def cluster(request) -> dict[str, object]:
    """``plan_only``: no cluster is connected (snapshot mode), so a sync only plans;
    ``scheduler``: the backend's name for people (Volcano, Kueue) and ``team_queues``: what a
    team's queue is called there."""
    from scheduling.backend import current_backend
    from scheduling.sync import is_plan_only

    backend = current_backend()
    queues = "Volcano Queues" if backend.name == "volcano" else "Kueue ClusterQueues and Cohorts"
    return {"plan_only": is_plan_only(), "scheduler": backend.label, "team_queues": queues}
