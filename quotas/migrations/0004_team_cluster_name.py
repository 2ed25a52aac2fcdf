"""Issue 25: Team.cluster_name, the fixed name the cluster sees; backfilled from the slug."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    Team = apps.get_model("quotas", "Team")
    Team.objects.filter(cluster_name__isnull=True).update(cluster_name=models.F("slug"))


class Migration(migrations.Migration):
    dependencies = [("quotas", "0003_quotarequest_reminder_sent_at")]

    operations = [
        migrations.AddField(
            model_name="team",
            name="cluster_name",
            field=models.CharField(max_length=63, null=True, editable=False),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
