"""Stage 3, search on Ray: the search space, the Tuner and its schedulers, the trial driver, the
Train worker, the report relay, the recorder (MLflow and the results table), the teacher on
workers and the resume state.

Kept empty on purpose: Tune's trial actors import `pipeline.search.driver` and nothing heavier.
"""
