"""Weighted, hierarchical Dominant Resource Fairness (pure): the solver's public interface.

Step 1 of the split: everything still lives in :mod:`.hierarchy`.
"""

from __future__ import annotations

import sys
import types

from . import hierarchy
from .hierarchy import (
    MAX_AMOUNT,
    REASON_DEMAND_MET,
    REASON_LIMIT,
    SATURATED_PREFIX,
    Allocation,
    ProblemError,
    Tenant,
    _solve,
    _solve_hierarchy_reference,
    _validate,
    allocations_to_json,
    dominant_share,
    main,
    parse_problem,
    solve,
)
from .hierarchy import _ramps_crossing as _ramps_crossing
from .hierarchy import _VERIFY as _VERIFY

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
_FORWARDED = {"_VERIFY": hierarchy, "_ramps_crossing": hierarchy}


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        home = _FORWARDED.get(name)
        if home is not None:
            setattr(home, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
