"""tilemm bench: suites, the runner that checks and times, and the report (tables, plots, roofline)."""
