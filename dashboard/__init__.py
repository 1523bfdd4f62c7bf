"""hadar-dashboard: the lab's web dashboard, a client of the master's gRPC API like hctl."""
