"""quotas.display: displayed resources and the department tree with rolled-up usage."""

from __future__ import annotations

from decimal import Decimal

from quotas.display import display_resources, shown, shown_amounts, team_tree

GPU = "nvidia.com/gpu"


def res(resource, allocated, pending=0, **extra):
    return {
        "resource": resource,
        "allocated": Decimal(allocated),
        "pending": Decimal(pending),
    } | extra


def test_only_the_listed_resources_gpus_first_and_no_zero_amounts(settings):
    settings.FAIRSHARE_DISPLAY_RESOURCES = ["cpu", "memory", GPU]
    assert display_resources() == [GPU, "cpu", "memory"]
    assert shown(["pods", "cpu", "hugepages-2Mi", GPU]) == [GPU, "cpu"]
    assert shown_amounts({"pods": "15510", "hugepages-1Gi": "0", "cpu": "0", GPU: "8"}) == [
        (GPU, "8")
    ]


def test_rows_come_in_tree_order_with_their_figures_untouched():
    # A department's figures are its subtree's already (monitoring.usage.current_usage): the
    # tree orders rows, it does not add teams up again (that once counted them twice).
    rows = [
        {"slug": "speech", "parent": "ai", "resources": [res(GPU, 4, 1)]},
        {"slug": "ai", "parent": None, "resources": [res(GPU, 16, 4, guarantee=96)]},
        {"slug": "cv", "parent": "ai", "resources": [res(GPU, 10, 3), res("cpu", 64)]},
        {"slug": "prod", "parent": None, "resources": [res(GPU, 7)]},
    ]

    tree = team_tree(rows)

    assert [(r["slug"], r["depth"], r["children"]) for r in tree] == [
        ("ai", 0, 2),
        ("cv", 1, 0),
        ("speech", 1, 0),
        ("prod", 0, 0),
    ]
    assert tree[0]["resources"] == rows[1]["resources"]
    assert tree[0] is not rows[1]  # rows are copied


def test_a_team_whose_department_is_not_shown_is_a_root():
    tree = team_tree([{"slug": "cv", "parent": "ai", "resources": [res(GPU, 3)]}])
    assert [(r["slug"], r["depth"]) for r in tree] == [("cv", 0)]


def test_nested_departments_nest_at_every_level():
    rows = [
        {"slug": "org", "parent": None, "resources": []},
        {"slug": "ai", "parent": "org", "resources": [res(GPU, 11)]},
        {"slug": "cv", "parent": "ai", "resources": [res(GPU, 10)]},
    ]
    tree = team_tree(rows)
    assert [(r["slug"], r["depth"]) for r in tree] == [("org", 0), ("ai", 1), ("cv", 2)]
