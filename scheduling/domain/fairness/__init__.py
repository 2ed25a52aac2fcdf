"""Weighted, hierarchical Dominant Resource Fairness by continuous progressive filling (pure).

Vocabulary
----------
*Dominant share* of a resource vector ``x`` against a capacity ``C`` is ``max_r x[r] / C[r]`` over
the resources with ``C[r] > 0``; the resource reaching the maximum is the *dominant resource*
(ties: first by name). A tenant's *demand* ``d`` is what it would use if it could; its *dominant
demand share* is ``s = dominant_share(d, C)``.

Package layout (imports point one way, down this list; no module imports one above it):

- :mod:`.model`: the problem's vocabulary (``Tenant``, ``Allocation``, ``ProblemError``,
  ``dominant_share``, the validated ``_Problem``);
- :mod:`.validation`: problem validation and packing into vectors;
- :mod:`.filling`: flat progressive filling of sibling groups, and the clamp of round-off;
- :mod:`.rounding`: rounding of integral resources by largest remainder;
- :mod:`.depths`: the hierarchy's sibling groups per depth, and its searches' tolerances;
- :mod:`.ramps`: the closed form of the deepest groups' sums (breakpoints and ramps);
- :mod:`.leaps`: moving the leaves part of the way where sums leap past a capacity or limit;
- :mod:`.searches`: the nested first crossings of the groups below the roots;
- :mod:`.hierarchy`: static H-DRF (the water level, event by event);
- :mod:`.solver`: ``solve()``, assembling the above; :mod:`.reference`: the tests' reference;
- :mod:`.cli` and ``__main__``: the JSON command line.

Guarantees of :func:`solve`
---------------------------
No resource is allocated over capacity; no tenant gets more than its demand or its limit; each
tenant gets at least ``min(guarantee, demand)`` (up to rounding of a fractional guarantee on an
integral resource); ties break by tenant name and then resource name, so the output is the same for
the same input whatever the order of ``tenants``. Invalid problems raise :class:`ProblemError`.

Command line: ``python -m scheduling.domain.fairness < problem.json > allocations.json``.
"""

from __future__ import annotations

import sys
import types

from . import searches
from .cli import allocations_to_json as allocations_to_json
from .cli import main as main
from .cli import parse_problem as parse_problem
from .model import REASON_DEMAND_MET as REASON_DEMAND_MET
from .model import REASON_LIMIT as REASON_LIMIT
from .model import SATURATED_PREFIX as SATURATED_PREFIX
from .model import Allocation as Allocation
from .model import ProblemError as ProblemError
from .model import Tenant as Tenant
from .model import dominant_share as dominant_share
from .reference import _solve_hierarchy_reference as _solve_hierarchy_reference
from .searches import _VERIFY as _VERIFY
from .searches import _ramps_crossing as _ramps_crossing
from .solver import _solve as _solve
from .solver import solve as solve
from .validation import MAX_AMOUNT as MAX_AMOUNT
from .validation import _validate as _validate

__all__ = [
    "REASON_DEMAND_MET",
    "REASON_LIMIT",
    "SATURATED_PREFIX",
    "Allocation",
    "ProblemError",
    "Tenant",
    "dominant_share",
    "main",
    "solve",
]

# Names that tests set on this package and that the solver reads from the module that defines
# them: an assignment here is passed on there (``monkeypatch`` undoes it the same way).
_FORWARDED = {"_VERIFY": searches, "_ramps_crossing": searches}


class _Package(types.ModuleType):
    """This package's module type: assignments of :data:`_FORWARDED` names reach their home."""

    def __setattr__(self, name: str, value: object) -> None:
        home = _FORWARDED.get(name)
        if home is not None:
            setattr(home, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
