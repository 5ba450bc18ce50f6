"""What the benchmarks share (machine line, doc sections, caches, models, write-ups), the child processes they
start and the reference code they time; no benchmark of its own."""
