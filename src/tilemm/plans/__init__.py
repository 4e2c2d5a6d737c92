"""Plans: a call checked once (checks), what it runs and how it runs again (plan.Plan: run,
run_again), the plans of repeated calls (cache), and a product found or planned, then run (calls)."""
