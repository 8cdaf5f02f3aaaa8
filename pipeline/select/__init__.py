"""Stage 5, select: from what `pipeline.measure` measured, the Pareto front and paired
statistics, the champion policy, the registry and the report."""
