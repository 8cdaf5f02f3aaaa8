"""Stage 4, measure and select: latency, the Pareto front and paired statistics, the champion
policy, the registry, the report and the consumers' pyfunc."""
