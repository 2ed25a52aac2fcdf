"""Chargeback of DRA GPUs (issue 34): GPU-equivalents priced per GPU product, device classes priced
per device-hour by their own rate cards. Eight 1g.10gb MIG slices of one H100 held for an hour:

* ``nvidia.com/gpu`` on the H100 flavor is 8 × 0.125 = 1 GPU-hour (not 8);
* ``mig.nvidia.com.deviceclass.resource.k8s.io/devices`` is 8 device-hours, billed as
  ``device-hour`` at the class's own rate when it has one (a per-slice price, or a surcharge),
  and listed unpriced when it has none.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

import pytest

from monitoring import chargeback, collection, rollups
from monitoring.models import RateCard
from tests.monitoring.test_dra_capacity import (
    GPU,
    H0,
    H100,
    claim,
    mig,
    node,
    pod,
    resource_slice,
    usage_of,
)

MIG = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"


@pytest.fixture
def an_hour_of_eight_slices(settings):
    settings.CELERY_BEAT_SCHEDULE = {
        "collect-usage": {
            "task": "monitoring.tasks.collect_usage",
            "schedule": timedelta(minutes=30),
        }
    }
    devices = [mig(f"gpu-0-mig-1g10gb-19-{i}", i, parent="GPU-m0") for i in range(8)]
    items = [node("m"), resource_slice("m", devices)]
    for i in range(8):
        items.append(pod("vision", f"p{i}", "m", claim=f"slice-{i}"))
        items.append(
            claim(
                "vision",
                f"slice-{i}",
                [("m", f"gpu-0-mig-1g10gb-19-{i}")],
                reserved_by=[f"p{i}"],
                device_class="mig.nvidia.com",
            )
        )
    usage = usage_of(items, {})
    assert usage.capacity[GPU] == D(1)  # one physical GPU, not 8
    assert usage.namespace_flavors["vision"][H100][GPU] == D(1)  # 8 × 0.125
    for minutes in (0, 30):
        collection.store_usage(usage, now=H0 + timedelta(minutes=minutes), source="test")
    rollups.rollup_usage(start=H0, end=H0 + timedelta(hours=1), now=H0 + timedelta(hours=2))


def report_lines():
    result = chargeback.build_report(
        start=H0, end=H0 + timedelta(hours=1), group_by=("resource", "flavor")
    )
    return {
        (r["resource"], r["flavor"]): (r["unit"], r["allocated_hours"], r["cost"])
        for r in result.rows()
        if r["resource"] in (GPU, MIG)
    }


def unpriced(resource):
    result = chargeback.build_report(
        start=H0, end=H0 + timedelta(hours=1), group_by=("resource", "flavor")
    )
    return [r["unpriced_records"] for r in result.rows() if r["resource"] == resource]


def card(resource, price, flavor=""):
    RateCard.objects.create(
        resource=resource,
        flavor=flavor,
        price_per_unit_hour=D(price),
        valid_from=H0 - timedelta(days=1),
    )


@pytest.mark.django_db
def test_gpu_equivalents_per_product_and_the_device_class_at_its_own_rate(
    an_hour_of_eight_slices,
):
    card(GPU, "4", flavor=H100)
    card(MIG, "0.30")

    assert report_lines() == {
        (GPU, H100): ("GPU-hour", "1.0000", "4.00"),
        (MIG, ""): ("device-hour", "8.0000", "2.40"),
    }


@pytest.mark.django_db
def test_a_device_class_without_a_rate_card_costs_nothing_and_is_still_listed(
    an_hour_of_eight_slices,
):
    card(GPU, "4", flavor=H100)

    lines = report_lines()
    assert lines[(GPU, H100)] == ("GPU-hour", "1.0000", "4.00")
    unit, hours, cost = lines[(MIG, "")]
    assert (unit, hours) == ("device-hour", "8.0000")
    assert cost == "0.00"
    assert (unpriced(MIG), unpriced(GPU)) == (["1"], ["0"])  # the report says it is unpriced
