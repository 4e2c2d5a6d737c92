"""The machine beneath everything: the GPU and its limits (machine), version shims (compat), timing, and
the tuning cache on disk. Imports nothing else of tilemm."""
