"""Stage 4, measure: the runtimes a model is served in, building and checking each runtime's form
of an export, timing every model and runtime (interleaved rounds with intervals), the measuring
actors and the nodes they run on. `pipeline.select` chooses from what this stage measured; this
stage never imports it.

Kept empty: `pipeline.config` imports `pipeline.measure.runtimes`, and importing a submodule runs
this file first."""
