"""The measuring tools: the benchmark (`python -m ddd.bench`), the tree-budget tool (`python -m ddd.bench.budget`)
and the precision drift measurement (`python -m ddd.bench.drift`). They drive the engine; the engine never
imports them."""
