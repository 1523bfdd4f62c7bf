"""Generated stubs of the hadar.v1 API (regenerate with `make protos`)."""
