"""The solver's reasons in people's words (issue 14)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from monitoring.models import UsageSample
from scheduling.reasons import reason_words
from scheduling.services import what_if
from tests.base import GPU

D = Decimal


def test_reasons_in_words():
    assert reason_words("demand-met", fair={GPU: D(12)}, limit={GPU: D(64)}) == (
        "the cluster has spare GPUs: you get your whole demand"
    )
    assert reason_words("limit", fair={GPU: D(64)}, limit={GPU: D(64)}) == (
        "held at your 64-GPU limit"
    )
    assert (
        reason_words(
            "limit",
            fair={GPU: D("40.5")},
            limit={GPU: D(96)},
            parent="ai-research",
            parent_limit={GPU: D(208)},
        )
        == "held at your department's 208-GPU limit"
    )
    assert reason_words("saturated:nvidia.com/gpu", fair={GPU: D(3)}, limit={}) == (
        "every one of the cluster's GPUs is wanted: you get your share by weight"
    )


def test_a_fraction_of_a_gpu_beyond_the_allocation_is_said():
    """Issue 34: DRA GPU-equivalents make fractional demand; allocations stay whole GPUs."""
    assert reason_words(
        "demand-met", fair={GPU: D(2)}, limit={GPU: D(64)}, demand={GPU: D("2.375")}
    ) == (
        "the cluster has spare GPUs: you get your whole demand in whole GPUs (the 0.375 "
        "GPU-equivalents more that your workloads want, parts of a GPU, are not rounded up to one)"
    )
    # A whole demand met, or a demand a whole GPU above (another reason's business): as before.
    for demand in (D(2), D(3)):
        assert reason_words("demand-met", fair={GPU: D(2)}, limit={}, demand={GPU: demand}) == (
            "the cluster has spare GPUs: you get your whole demand"
        )


@pytest.mark.django_db
def test_the_preview_gives_each_side_its_reason_in_words(cast):
    """100 GPUs; team-a measured at 10 (spare GPUs), raised to a 15-GPU limit it fills."""
    UsageSample.objects.create(
        taken_at=timezone.now(),
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        allocated=D(10),
        pending=D(30),
    )
    result = what_if({"team-a": {"limit": {GPU: "15"}, "guarantee": {GPU: "15"}}}).to_dict()
    team_a = next(t for t in result["teams"] if t["team"] == "team-a")
    assert team_a["before"]["why"] == "the cluster has spare GPUs: you get your whole demand"
    assert team_a["after"]["why"] == "held at your 15-GPU limit"
