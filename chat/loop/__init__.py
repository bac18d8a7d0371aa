"""The message loop of seed 003: ingress (dedup, persisted queue), the per-channel unread pool,
the scheduler with its channel locks, trigger rules, the planner and its actions."""
