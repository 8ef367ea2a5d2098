"""Benchmarks and their workers: throughput (`minibroker bench produce|consume`), groups,
our client against others, the rolling-bounce rebalance and the Spark data source. They
print figures; nothing here asserts a time. bench/ imports protocol/, broker/, client/ and
spark_jobs/, never tools/ or cli/ (docs/ARCHITECTURE.md §2)."""
