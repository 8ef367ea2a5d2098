"""Benchmarks and their workers: throughput (`minibroker bench produce|consume`), groups,
our client against others, the rolling-bounce rebalance and the Spark data source. They
print figures; nothing here asserts a time. bench/ may import every other package."""
