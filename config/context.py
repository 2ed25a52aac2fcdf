"""Template context shared by every page."""

from __future__ import annotations


def cluster(request) -> dict[str, bool]:
    """``plan_only``: no cluster is connected (snapshot mode), so a sync only plans."""
    from scheduling.sync import is_plan_only

    return {"plan_only": is_plan_only()}
