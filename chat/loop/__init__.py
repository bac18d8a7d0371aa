"""The message loop of seed 003: intake (what the gateway hands over, written to the event queue
by `chat.services.event_queue`), the scheduler (busy stretches, one loop per channel), reactive
trigger handling, the autonomous planner loop, and the worker's end of the control group. The
pure rules it applies (trigger rules, planner prompt and actions) live in `chat.pipeline`."""
