"""A module that breaks the import rules on purpose, for ``test_import_graph.py``: the walker
reads it as if it were a dashboard view, a Celery task module, a service or pipeline code,
and must report each broken rule. It lives in the tests tree, which the real walk leaves out,
and nothing imports it."""

# ruff: noqa: F401

import discord

from chat import selectors
from chat.gateway.rest import rest_port
from chat.loop import scheduler
from chat.sandbox.control import ControlClient
from chat.worker import run_worker

from ..loop import intake  # read relative to the module the walker takes this file to be
