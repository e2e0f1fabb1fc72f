"""The search-space file: schema, loading with file/key/line errors, `--set`, conditioning.

Callers import the package (`from autotune import space as sp; sp.load(...)`); the modules are
schema (the model and `dump`), load (reading and validation), values (one knob's value or
domain), overrides (`--set`), conditioning (knobs that cannot act on this setup), probe
(`probe_config`: the `ProbeConfig` one trial of a space runs), builtin (the shipped spaces) and
yaml_reader (the bounded YAML reader, shared with recipe files).

The package imports no torch, ray or mlflow.
"""

from __future__ import annotations

from autotune.errors import SpaceError
from autotune.knobs import (
    CLIP_CHILDREN,
    DDP_KNOBS,
    ENV_PREFIXES,
    KNOBS,
    SCALER_KNOBS,
    KnobInfo,
    Scalar,
)
from autotune.space.builtin import builtin_dir, builtin_names, find
from autotune.space.conditioning import (
    ENV_SOCKET_KNOBS,
    Conditioned,
    clip_child_possible,
    condition,
    condition_on,
    env_dropped,
    env_dropped_text,
    midpoint_env,
)
from autotune.space.dtypes import dtype_warnings
from autotune.space.env_names import env_mapping_warnings, env_warnings
from autotune.space.load import (
    accum_values,
    anchor_script,
    anchor_workload,
    load,
    loads,
    validate_section,
)
from autotune.space.probe import probe_config
from autotune.space.schedule_warnings import schedule_warnings
from autotune.space.schema import (
    DEFAULT_CONSTRAINTS,
    DEFAULT_OBJECTIVES,
    ENV_COMM_PREFIXES,
    ENV_FP16_ALT_IMPL,
    ENV_SITE_SETTINGS,
    LL128_ARCHS,
    METRICS,
    POSITIVE_METRICS,
    TOP_KEYS,
    Budget,
    Constraint,
    DivergenceSettings,
    Domain,
    KnobValue,
    Objective,
    ProbeSettings,
    RungSettings,
    SamplerSettings,
    Space,
    VerifySettings,
    WorkloadRef,
    dump,
)
from autotune.space.seeds import MAX_SEED, MAX_VERIFY_SEEDS, seed_problem
from autotune.space.values import ErrorAt, check_value, env_value
from autotune.space.yaml_lines import key_line

__all__ = [
    "CLIP_CHILDREN",
    "DDP_KNOBS",
    "DEFAULT_CONSTRAINTS",
    "DEFAULT_OBJECTIVES",
    "ENV_COMM_PREFIXES",
    "ENV_FP16_ALT_IMPL",
    "ENV_PREFIXES",
    "ENV_SITE_SETTINGS",
    "ENV_SOCKET_KNOBS",
    "KNOBS",
    "LL128_ARCHS",
    "MAX_SEED",
    "MAX_VERIFY_SEEDS",
    "METRICS",
    "POSITIVE_METRICS",
    "SCALER_KNOBS",
    "TOP_KEYS",
    "Budget",
    "Conditioned",
    "Constraint",
    "DivergenceSettings",
    "Domain",
    "ErrorAt",
    "KnobInfo",
    "KnobValue",
    "Objective",
    "ProbeSettings",
    "RungSettings",
    "SamplerSettings",
    "Scalar",
    "Space",
    "SpaceError",
    "VerifySettings",
    "WorkloadRef",
    "accum_values",
    "anchor_script",
    "anchor_workload",
    "builtin_dir",
    "builtin_names",
    "check_value",
    "clip_child_possible",
    "condition",
    "condition_on",
    "dtype_warnings",
    "dump",
    "env_dropped",
    "env_dropped_text",
    "env_mapping_warnings",
    "env_value",
    "env_warnings",
    "find",
    "key_line",
    "load",
    "loads",
    "midpoint_env",
    "probe_config",
    "schedule_warnings",
    "seed_problem",
    "validate_section",
]
