"""User privacy becomes per (guild, user).

Until now one row per user applied in every guild. So that nobody is seen more after the
upgrade than before, each existing row is copied to every configured guild (the row's own
guild keeps the original; set_by and the level travel with it). A row with no guild when no
guild is configured governs nothing and is dropped.
"""

from django.db import migrations, models
import django.db.models.deletion


def spread_to_guilds(apps, schema_editor):
    UserPrivacy = apps.get_model("personas", "UserPrivacy")
    GuildConfig = apps.get_model("personas", "GuildConfig")
    guild_ids = list(GuildConfig.objects.order_by("pk").values_list("pk", flat=True))
    for row in list(UserPrivacy.objects.order_by("pk")):
        own = row.guild_id or (guild_ids[0] if guild_ids else None)
        if own is None:
            row.delete()
            continue
        if row.guild_id != own:
            UserPrivacy.objects.filter(pk=row.pk).update(guild_id=own)
        for guild_id in guild_ids:
            if guild_id == own:
                continue
            UserPrivacy.objects.create(
                user_id=row.user_id,
                level=row.level,
                blacklisted=row.blacklisted,
                guild_id=guild_id,
                set_by=row.set_by,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("personas", "0012_dm_persona_and_planner_model"),
    ]

    operations = [
        migrations.AlterField(
            model_name="userprivacy",
            name="user_id",
            field=models.PositiveBigIntegerField(),
        ),
        migrations.RunPython(spread_to_guilds, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="userprivacy",
            name="guild",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="users",
                to="personas.guildconfig",
            ),
        ),
        migrations.AlterModelOptions(
            name="userprivacy",
            options={
                "ordering": ["guild_id", "user_id"],
                "verbose_name": "user privacy",
                "verbose_name_plural": "user privacy",
            },
        ),
        migrations.AddConstraint(
            model_name="userprivacy",
            constraint=models.UniqueConstraint(
                fields=("guild", "user_id"), name="privacy_one_per_guild_user"
            ),
        ),
        migrations.AddIndex(
            model_name="userprivacy",
            index=models.Index(fields=["user_id"], name="privacy_user"),
        ),
    ]
