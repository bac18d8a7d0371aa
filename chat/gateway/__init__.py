"""The Discord edge: the only package that imports discord.py (client, conversion, delivery)."""
