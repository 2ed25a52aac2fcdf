"""``manage.py past_usage [--rebuild] [--half-life 7d]``: fairness over time's folded past use.

Without options it folds the settled hours into the state of the half-life in force and prints,
per team, its decayed mean allocation and its dominant share of the capacity. ``--rebuild``
drops the state first and folds the whole hourly history again (after re-rolling a past window
with ``rollup_usage``, whose changes a fold already past those hours does not see).
``--half-life`` works on another half-life than the one in force. Off and no ``--half-life``:
a message and exit status 1.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from config.env import parse_duration
from quotas.models import Team
from scheduling.domain import pastuse as formula
from scheduling.models import PastUsageState
from scheduling.pastuse import current_fairness, describe_half_life, fold


class Command(BaseCommand):
    help = "Fold (or rebuild) the decayed past use that fairness over time weighs, and show it."

    def add_arguments(self, parser):
        parser.add_argument("--rebuild", action="store_true", help="Fold the whole history again.")
        parser.add_argument(
            "--half-life", help="A duration such as 7d (default: the one in force)."
        )

    def handle(self, *args, rebuild: bool = False, half_life: str | None = None, **options):
        if half_life is not None:
            try:
                seconds = parse_duration(half_life)
            except ValueError as e:
                raise CommandError(f"--half-life: {e}") from None
            if seconds < 3600:
                raise CommandError("--half-life: a half-life must be at least 1h.")
        else:
            fairness = current_fairness()
            if not fairness.enabled:
                raise CommandError(
                    "Fairness over time is off (FAIRSHARE_USAGE_HALF_LIFE unset or 0, or strength "
                    "0); give --half-life to fold one anyway."
                )
            seconds = fairness.half_life_seconds
        if rebuild:
            PastUsageState.objects.filter(half_life_seconds=seconds).delete()
        state = fold(half_life=seconds)
        if state is None:
            self.stdout.write("No hourly rollups or capacity settled yet: nothing to fold.")
            return
        self.stdout.write(
            f"half-life {describe_half_life(seconds)}: {state.folded_hours} hours folded, "
            f"{state.first:%Y-%m-%d %H:%M} to {state.through:%Y-%m-%d %H:%M} UTC"
        )
        names = dict(Team.objects.values_list("id", "slug"))
        for team_id, sums in sorted(state.usage.items(), key=lambda i: names.get(int(i[0]), "")):
            share, resource = formula.dominant_past_share(sums, state.capacity)
            mean = formula.mean_amounts(sums, seconds)
            amounts = ", ".join(f"{r} {v:.2f}" for r, v in mean.items())
            self.stdout.write(
                f"{names.get(int(team_id), team_id)}: {share:.2%} of the cluster ({resource}); "
                f"mean {amounts}"
            )
