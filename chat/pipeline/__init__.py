"""The pure context pipeline: a channel's messages in, a persona's prompt out.

No django, discord, redis, network, clock or settings: frozen dataclasses in, plain data out.
Read it in the order a turn runs (seeds 000 and 002):

- ``types``: the inputs (a converted Discord message, persona and guild configuration).
- ``window``: how many messages a turn reads and where its window starts (anchored selection);
  ``window_reuse``: whether a turn may reuse the previous window.
- ``simplify``: messages to simplified history: privacy and blocks, notices, reply quotes,
  same-author merging, compact ids (``message_id_map``), mention names (``markup``).
- ``participants``: who takes part in the visible conversation.
- ``tools``: the turn's tool allowlist (Deliberate Tool Mode admission).
- ``dialogue``: history to tagged items: roles, labels, media (``media``), date spacers,
  context notes at depth (``notes``), macros (``macros``).
- ``directives``: tail directives and the prefill.
- ``tokens`` and ``truncation``: counting and fitting the budget.
- ``context``: ``build_turn_context``, the one entry point, and ``TurnInput``/``TurnContext``.
- ``projections``: a built context projected for one model attempt.
"""
