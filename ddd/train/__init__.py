"""The draft-head trainer (`python -m ddd.train`, docs/training.md). It drives the engine's heads and models;
the engine never imports it."""
