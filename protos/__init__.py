"""The gRPC contract between Hadar's processes: `hadar/v1/*.proto` and generated stubs."""
