"""The bot's use cases, one module each; reads are in `chat.selectors`.

- `turns`: preparing a persona turn (`turn_prepare`, also as a dry run) and running it to a
  delivered reply (`turn_run`); `turn_request` holds what a turn is given, `turn_input` its read
  side, `turn_tools` the tools it offers, `turn_delivery` and `reply_stream` how its reply goes
  out (whole, or as the model writes), `turn_record` what it writes.
- `recovery`: settling the turns a stopped worker left running or delivering.
- `planner_steps`: the autonomous planner's record.
- `short_term_memory`: the memory rows; `memory_refresh` the background summarisation.
- `memory_store`: long-term memories kept, searched and forgotten; `memory_recall` their
  per-guild index and each turn's recall; `memory_extraction` facts proposed from quiet
  conversations; `memory_documents` guild documents read, cut into passages and embedded.
- `event_queue`: incoming messages persisted, deduplicated and moved into unread pools.
- `message_index`: a proxy system's messages in the message index.
- `retention`: records past their keeping time deleted in bounded batches.
- `discord_names`: the names of guilds, channels, threads and users, kept from the gateway.
- `greeting`: a persona's first message posted in a channel, recorded as a turn.
- `commands`: what the slash commands do (privacy, memory, personas, reset, prompt, why), with
  their permission checks and rate limit.
"""
