"""The reference solver that the differential tests compare the default with (pure).

The nested search without the closed form is kept as :func:`_solve_hierarchy_reference`.
It is the same H-DRF with every sibling group's first crossing found by the nested safeguarded
search (no closed form for the deepest groups). Setting ``_VERIFY`` (on the package, which
passes it on to :mod:`.hierarchy`) checks every closed-form crossing against the search's at
the same inputs instead.

Invariant: on the same problem, the reference and :func:`.solver._solve` agree (allocations to
1e-9 relative, reasons exactly) wherever the problem is not degenerate (see the tests).
"""

from __future__ import annotations

from .model import Allocation, _Problem
from .solver import _solve


def _solve_hierarchy_reference(problem: _Problem) -> dict[str, Allocation]:
    """:func:`_solve` with every sibling group's first crossing found by the nested search.

    The slow form of the same H-DRF (no closed form for the deepest groups), kept as the
    reference that the differential tests compare the default with.
    """
    return _solve(problem, fast=False)
