"""simdist benchmarks: `python -m simdist.benchmarks` prints a table and writes benchmarks/results.json."""
