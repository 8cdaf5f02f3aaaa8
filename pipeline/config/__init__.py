"""The sweep spec: one YAML file that says what to compress, how, and where to run it.

This package's face is the contract: the rest of drydock, tests, benchmarks and users import
from `pipeline.config`, never from its modules, which split it by concern:

- `schema`: the models of every section of a spec (frozen, unknown keys refused), the markers
  of what each field counts for in a run's records, and the spec's limits;
- `domains`: the search domains a method parameter may be given as (grid, choice, uniform,
  loguniform, randint);
- `params`: each method's parameters as the spec gives them, values or domains, checked by the
  method's own `Params`;
- `loader`: YAML, `${VAR}` expansion, `--set` overrides, validation, `load_spec`;
- `messages`: every problem as one `field.path: what was expected` line, with "did you mean";
- `checks`: what the fields alone cannot say (methods against resources, trial counts, the
  teacher's own limits, the DeepSpeed preset), for `load_spec` and `drydock validate`.

A spec pickled before the split names its classes as `pipeline.config.<Class>`: the names below
keep resolving it.
"""

from pipeline.config.checks import (
    NO_METHODS,
    OBJECT_STORE_SCHEMES,
    RAY_STORAGE_SCHEMES,
    check_for_sweep,
    distinct_configurations,
    load_deepspeed_preset,
    package_folder,
    pickle_only,
    search_problems,
    teacher_config,
    teacher_problems,
    trial_count,
    trial_count_problems,
    validate_methods,
)
from pipeline.config.domains import (
    DOMAIN_KINDS,
    DOMAINS,
    Choice,
    Domain,
    Grid,
    LogUniform,
    Number,
    RandInt,
    Sampled,
    Uniform,
    as_domain,
    domain_candidates,
    domain_draw,
    is_domain,
)
from pipeline.config.loader import (
    apply_overrides,
    error_lines,
    load_spec,
    parse_override,
    spec_as_written,
    spec_from_dict,
    spec_to_dict,
    written_values,
)
from pipeline.config.messages import did_you_mean, format_error, param_error
from pipeline.config.params import (
    MAX_COMBINATIONS_CHECKED,
    METHOD_PROBLEMS,
    PARAM_PROBLEMS,
    ParamSpace,
    default_params,
    method_spaces,
    param_space_model,
    space_from_state,
)
from pipeline.config.schema import (
    ADDED_LATER,
    DEFAULT_FRONT,
    DEFAULT_SHAPES,
    GLUE_TASKS,
    HOW_IT_RUNS,
    KEPT_BY_THE_RUN,
    MAX_NAME_LENGTH,
    MAX_SEED,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_VALUES,
    MAX_TRIALS,
    NOT_FINGERPRINTED,
    ArchitectureConfig,
    AshaConfig,
    CarvedSplit,
    DeepSpeedConfig,
    FilesSource,
    FinetuneSettings,
    Fraction,
    HubSplits,
    LatencyConfig,
    NonNegInt,
    PlainName,
    PositiveFloat,
    PositiveInt,
    ResourcesConfig,
    SearchConfig,
    Seed,
    SelectionConfig,
    Shape,
    SplitName,
    StudentConfig,
    SweepSpec,
    SyntheticSource,
    TaskConfig,
    TeacherConfig,
    TokenizerConfig,
    TrackingConfig,
    TrainConfig,
)
from pipeline.measure.runtimes import DEFAULT_RUNTIMES, RuntimeName

__all__ = [
    "ADDED_LATER", "DEFAULT_FRONT", "DEFAULT_RUNTIMES", "DEFAULT_SHAPES", "DOMAINS", "DOMAIN_KINDS", "GLUE_TASKS", "HOW_IT_RUNS",
    "KEPT_BY_THE_RUN", "MAX_COMBINATIONS_CHECKED", "MAX_NAME_LENGTH", "MAX_SEED", "MAX_SPEC_BYTES", "MAX_SPEC_DEPTH", "MAX_SPEC_VALUES", "MAX_TRIALS",
    "METHOD_PROBLEMS", "NOT_FINGERPRINTED", "NO_METHODS", "PARAM_PROBLEMS", "ArchitectureConfig", "AshaConfig", "CarvedSplit", "Choice",
    "DeepSpeedConfig", "Domain", "FilesSource", "FinetuneSettings", "Fraction", "Grid", "HubSplits", "LatencyConfig", "LogUniform",
    "NonNegInt", "Number", "ParamSpace", "PlainName", "PositiveFloat", "PositiveInt", "RandInt", "ResourcesConfig", "RuntimeName",
    "Sampled", "SearchConfig", "Seed", "SelectionConfig", "Shape", "SplitName", "StudentConfig", "SweepSpec", "SyntheticSource",
    "TaskConfig", "TeacherConfig", "TokenizerConfig", "TrackingConfig", "TrainConfig", "Uniform", "apply_overrides", "as_domain",
    "check_for_sweep", "package_folder", "pickle_only", "OBJECT_STORE_SCHEMES", "RAY_STORAGE_SCHEMES", "default_params", "did_you_mean", "domain_candidates", "domain_draw", "error_lines", "format_error", "is_domain",
    "load_deepspeed_preset", "load_spec", "method_spaces", "param_error", "param_space_model", "parse_override", "spec_from_dict",
    "space_from_state", "spec_as_written", "spec_to_dict", "written_values", "teacher_config", "teacher_problems", "trial_count", "distinct_configurations", "search_problems", "trial_count_problems", "validate_methods",
]
