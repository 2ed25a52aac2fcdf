"""``manage.py adopt_namespace NAME --team SLUG [--confirm]``: adopt an existing namespace.

Without ``--confirm`` it only prints what the sync would write into the namespace (labels, the
queue annotation, ResourceQuota, LimitRange, RoleBindings, the Volcano Role) and changes
nothing; with it, the namespace becomes the team's, marked adopted (never deleted by a prune).
A protected namespace (FAIRSHARE_PROTECTED_NAMESPACES, the namespace Fairshare runs in) or a
name the cluster would refuse is an error naming the rule, exit status 1.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from quotas.models import Team
from scheduling.adoption import adopt_namespace, adoption_preview


def _messages(error: ValidationError) -> str:
    if hasattr(error, "message_dict"):
        return "; ".join(f"{k}: {m}" for k, ms in error.message_dict.items() for m in ms)
    return "; ".join(error.messages)


class Command(BaseCommand):
    help = (
        "Adopt a namespace that exists in the cluster and that Fairshare did not create: show "
        "what the sync will write into it, and with --confirm record it as the team's."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="The namespace.")
        parser.add_argument("--team", required=True, help="Slug of the team that gets it.")
        parser.add_argument(
            "--confirm", action="store_true", help="Adopt it (without: only show the preview)."
        )

    def handle(self, *args, name: str, team: str, confirm: bool = False, **options):
        owner = Team.objects.filter(slug=team).first()
        if owner is None:
            raise CommandError(f"--team: no team with the slug {team!r}.")
        try:
            lines = adoption_preview(name, owner)
        except ValidationError as e:
            raise CommandError(f"Refused: {_messages(e)}") from None
        self.stdout.write(f"Adopting {name} for {owner.slug}, the sync will write:")
        for line in lines:
            self.stdout.write(f"  {line}")
        self.stdout.write(
            "The namespace is never deleted by Fairshare; removing it from Fairshare releases "
            "it (our labels, annotations and objects go, the namespace stays)."
        )
        if not confirm:
            self.stdout.write("Nothing changed. Run again with --confirm to adopt it.")
            return
        try:
            adopt_namespace(name, owner, actor=None)
        except ValidationError as e:
            raise CommandError(f"Refused: {_messages(e)}") from None
        self.stdout.write(self.style.SUCCESS(f"Adopted {name} for {owner.slug}."))
