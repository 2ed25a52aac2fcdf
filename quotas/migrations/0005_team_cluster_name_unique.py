"""Issue 25: Team.cluster_name becomes required and unique (after the backfill in 0004)."""

import quotas.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("quotas", "0004_team_cluster_name")]

    operations = [
        migrations.AlterField(
            model_name="team",
            name="cluster_name",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="Name in the cluster (Queue, labels): the slug at creation, fixed for good.",
                max_length=63,
                unique=True,
                validators=[quotas.fields.dns1123_label],
            ),
        ),
    ]
