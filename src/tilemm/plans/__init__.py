"""Plans: a call checked once (checks), what it runs (plan.Plan), and the plans of repeated calls (cache)."""
