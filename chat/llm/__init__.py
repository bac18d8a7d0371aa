"""Model access, with no Django: the worker passes settings in and records results itself.

Model access: one protocol, one OpenAI-compatible implementation, and what is built on it.

- ``base``: ``LLMClient`` (the protocol), ``ChatRequest``, ``Completion``, ``ModelSpec``,
  ``Usage``, and ``LLMError`` (the only error, with ``permanent``, ``kind`` and ``status``).
- ``openai_compat``: ``OpenAICompatibleClient`` over httpx (JSON and SSE streaming, timeouts).
- ``attempts``: ``AttemptRunner.complete_turn``: retries, fallback models, per-attempt
  ``render(AttemptPlan)``, empty-answer retry, tool rounds, one ``AttemptRecord`` per call.
- ``reply``: removing ``<think>`` blocks and the persona's ``Name:`` label.
- ``tools``: Deliberate Tool Mode's tools, their schemas and their dependency protocols.
- ``fake_server``: a local OpenAI-compatible server with scripted answers and faults.
"""
