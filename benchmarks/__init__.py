"""simdist benchmarks: `python -m benchmarks` prints a table and writes benchmarks/results.json."""
