"""The worker agent: registers with the master, heartbeats, runs and supervises tasks, relays
progress and exits, and serves the Worker gRPC API."""
