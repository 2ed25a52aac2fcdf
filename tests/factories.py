"""factory-boy factories with Sequence names (Paperless style)."""

from decimal import Decimal

import factory
from django.contrib.auth.models import User

from quotas.models import Namespace, Team, TeamQuota


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.Sequence(lambda n: f"Team {n}")
    weight = 1


class NamespaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Namespace

    name = factory.Sequence(lambda n: f"ns-{n}")
    team = factory.SubFactory(TeamFactory)


class TeamQuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamQuota

    team = factory.SubFactory(TeamFactory)
    resource = "nvidia.com/gpu"
    guarantee = Decimal(0)
    limit = Decimal(8)
