"""``python -m scheduling.domain.fairness < problem.json > allocations.json`` (see :mod:`.cli`)."""

import sys

from .cli import main

sys.exit(main())
