"""ZeroGPU stand-ins for the tests (spaces: the `spaces` package)."""
