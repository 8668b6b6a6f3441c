"""What the training loop and the searchers take from the experiment config: typed, defaults in one place.

The schema (``_schema.py``) validates a config file once; :class:`TrainingSettings` is the part
of it the loop needs. The runner builds it from the validated config and carries it to workers
in the worker spec; ``determined_lite.pytorch.init(exp_conf=...)`` builds it from a (possibly
partial) mapping for plain-Python runs. :class:`SearcherSettings` is what every searcher has of
the ``searcher`` section (a searcher's own fields, their defaults and checks live with it in
``determined_lite/searcher/``) and :class:`ExperimentSettings` what the experiment runner reads;
both read a validated config and check nothing again. Determined's defaults for the rest are
owned here: the schema and the readers take them from this module. Importing this module does
not import torch.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, Mapping, Optional, Tuple

from determined_lite.config._plugins import DEFAULT_ENGINE, DEFAULT_EXECUTOR
from determined_lite.config.units import Batch, TrainUnit, length_from_config, length_to_config

# Determined's defaults, owned here; the schema and the loop read them from this module.
DEFAULT_SCHEDULING_UNIT = 100
DEFAULT_SMALLER_IS_BETTER = True
DEFAULT_REPORTING_PERIOD: TrainUnit = Batch(DEFAULT_SCHEDULING_UNIT)
DEFAULT_MAX_RESTARTS = 5
# Searchers: max_concurrent_trials of grid and random (a searcher's own fields and their
# defaults live with it in determined_lite/searcher/).
DEFAULT_MAX_CONCURRENT_TRIALS = 16
# The searcher length of a script that trains to its own (no max_length, no max_time).
OWN_LENGTH = 0
# The values of searcher.time_metric that are a unit, not a reported metric.
UNIT_TIME_METRICS = ("batches", "epochs", "records")
# `--test` (test mode) runs what the real run depends on at least twice, so that a metric whose
# shape or type changes between batches fails here, not after the first epoch: two optimizer
# steps of training, two validation batches (evaluate_batch), one checkpoint.
TEST_MODE_STEPS = 2
TEST_MODE_VALIDATION_BATCHES = 2


class CheckpointPolicy(str, enum.Enum):
    """Which validations also checkpoint: Determined's ``checkpoint_policy``."""

    BEST = "best"  # the searcher metric improved
    ALL = "all"
    NONE = "none"


# torch.compile's modes (``mode`` applies to the inductor backend only).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_FIELD = "optimizations.compile"


@dataclasses.dataclass(frozen=True)
class CompileSettings:
    """``optimizations.compile`` (det-lite's own): capture the wrapped models' forward (and so
    backward) as graphs with ``torch.compile``. See ``determined_lite/pytorch/_compile.py``."""

    enabled: bool = False
    mode: Optional[str] = None  # torch.compile(mode=...): inductor only
    backend: str = "inductor"
    fullgraph: bool = False
    dynamic: bool = False  # torch.compile(dynamic=...): false: static shapes, one graph per batch size
    retrace_every_iteration: bool = False

    @classmethod
    def from_value(cls, value: Any, where: str = COMPILE_FIELD) -> "CompileSettings":
        """``True``/``False``, a mapping of the fields (missing or null: default), or an instance.

        Raises ``ValueError`` with one line naming ``where``'s bad field and what it expects.
        """
        if isinstance(value, cls):
            return value
        if value is None:
            return cls()
        if isinstance(value, bool):
            return cls(enabled=value)
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{where}: expected true, false or a mapping of {_compile_fields()}, got {value!r}"
            )
        unknown = sorted(str(k) for k in value if k not in _compile_fields())
        if unknown:
            raise ValueError(f"{where}: unknown field {unknown[0]!r}; fields: {_compile_fields()}")
        values = {k: v for k, v in value.items() if v is not None}
        for name in ("enabled", "fullgraph", "retrace_every_iteration", "dynamic"):
            if name in values and not isinstance(values[name], bool):
                raise ValueError(f"{where}.{name}: expected true or false, got {values[name]!r}")
        if "mode" in values and values["mode"] not in COMPILE_MODES:
            modes = ", ".join(COMPILE_MODES)
            raise ValueError(f"{where}.mode: expected one of {modes}, got {values['mode']!r}")
        backend = values.get("backend", cls.backend)
        if not isinstance(backend, str) or not backend:
            raise ValueError(
                f"{where}.backend: expected a torch.compile backend name such as 'inductor', got {backend!r}"
            )
        if "mode" in values and backend != "inductor":
            raise ValueError(f"{where}.mode: applies to backend 'inductor' only, got backend {backend!r}")
        return cls(**values)

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _compile_fields() -> str:
    return ", ".join(f.name for f in dataclasses.fields(CompileSettings))


def _get(conf: Mapping[str, Any], *path: str) -> Any:
    """``conf[path[0]][path[1]]...``, or None when any step is missing or None."""
    node: Any = conf
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    return node


def _period(value: Any, field: str) -> Optional[TrainUnit]:
    if value is None:
        return None
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value.values())) == 0:
        return None  # Determined's {batches: 0}: no periodic workload
    return length_from_config(value, field)


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """The experiment-config fields the training loop uses (Determined's names in comments)."""

    searcher_metric: Optional[str] = None  # searcher.metric
    smaller_is_better: bool = DEFAULT_SMALLER_IS_BETTER  # searcher.smaller_is_better
    max_length: Optional[TrainUnit] = None  # searcher.max_length
    validation_period: Optional[TrainUnit] = None  # min_validation_period
    checkpoint_period: Optional[TrainUnit] = None  # min_checkpoint_period
    reporting_period: TrainUnit = DEFAULT_REPORTING_PERIOD  # scheduling_unit
    checkpoint_policy: CheckpointPolicy = CheckpointPolicy.BEST
    step_zero_validation: bool = False  # perform_initial_validation
    aggregation_frequency: int = 1  # optimizations.aggregation_frequency
    average_aggregated_gradients: bool = True  # optimizations.average_aggregated_gradients
    average_training_metrics: bool = True  # optimizations.average_training_metrics
    experiment_seed: Optional[int] = None  # reproducibility.experiment_seed
    profiling_enabled: bool = False  # profiling.enabled: det-lite's Profiler callback
    profiling_begin_on_batch: int = 0  # profiling.begin_on_batch
    profiling_end_after_batch: Optional[int] = None  # profiling.end_after_batch
    callback_modules: Tuple[str, ...] = ()  # det_lite.callback_modules (det-lite's own)
    records_per_epoch: int = 0  # records_per_epoch: only compared with the loader (0: not given)
    compile: CompileSettings = CompileSettings()  # optimizations.compile (det-lite's own)

    @classmethod
    def from_config(cls, exp_conf: Mapping[str, Any]) -> "TrainingSettings":
        """Read the fields of ``exp_conf``; a missing or null field takes Determined's default.

        Accepts a partial mapping (plain-Python ``init(exp_conf=...)``); an experiment's config
        was validated by the schema first, so nothing here can fail for it (a plain-Python
        ``optimizations.compile`` with a bad value raises a one-line ``ValueError``).
        """
        d = cls()
        unit = _get(exp_conf, "scheduling_unit")
        policy = _get(exp_conf, "checkpoint_policy")
        return cls(
            searcher_metric=_get(exp_conf, "searcher", "metric"),
            smaller_is_better=_or(_get(exp_conf, "searcher", "smaller_is_better"), d.smaller_is_better),
            max_length=_period(_searcher_length(exp_conf), "searcher.max_length"),
            validation_period=_period(_get(exp_conf, "min_validation_period"), "min_validation_period"),
            checkpoint_period=_period(_get(exp_conf, "min_checkpoint_period"), "min_checkpoint_period"),
            reporting_period=Batch(int(unit)) if unit else d.reporting_period,
            checkpoint_policy=CheckpointPolicy(policy) if policy else d.checkpoint_policy,
            step_zero_validation=bool(_get(exp_conf, "perform_initial_validation")),
            aggregation_frequency=_or(
                _get(exp_conf, "optimizations", "aggregation_frequency"), d.aggregation_frequency
            ),
            average_aggregated_gradients=_or(
                _get(exp_conf, "optimizations", "average_aggregated_gradients"),
                d.average_aggregated_gradients,
            ),
            average_training_metrics=_or(
                _get(exp_conf, "optimizations", "average_training_metrics"), d.average_training_metrics
            ),
            experiment_seed=_get(exp_conf, "reproducibility", "experiment_seed"),
            profiling_enabled=bool(_get(exp_conf, "profiling", "enabled")),
            profiling_begin_on_batch=_or(_get(exp_conf, "profiling", "begin_on_batch"), 0),
            profiling_end_after_batch=_get(exp_conf, "profiling", "end_after_batch"),
            callback_modules=tuple(_get(exp_conf, "det_lite", "callback_modules") or ()),
            records_per_epoch=int(_get(exp_conf, "records_per_epoch") or 0),
            compile=CompileSettings.from_value(_get(exp_conf, "optimizations", "compile")),
        )

    def to_json(self) -> Dict[str, Any]:
        """A JSON-able dict (lengths in Determined's ``{unit: n}`` form); see :meth:`from_json`."""
        out: Dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, TrainUnit):
                value = length_to_config(value)
            elif isinstance(value, CheckpointPolicy):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, CompileSettings):
                value = value.to_json()
            out[field.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TrainingSettings":
        values = dict(data)
        for name in ("max_length", "validation_period", "checkpoint_period", "reporting_period"):
            if values.get(name) is not None:
                values[name] = length_from_config(values[name], name)
        if "checkpoint_policy" in values:
            values["checkpoint_policy"] = CheckpointPolicy(values["checkpoint_policy"])
        if "callback_modules" in values:
            values["callback_modules"] = tuple(values["callback_modules"])
        if "compile" in values:
            values["compile"] = CompileSettings.from_value(values["compile"])
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class SearcherSettings:
    """The ``searcher`` fields the searchers use, read from a validated ``searcher`` section.

    ``max_length`` is the integer in ``unit`` ("batches", "records" or "epochs"). A searcher's
    own fields (adaptive_asha's ``divisor``, ...) are its to read, from ``section``.
    """

    name: str
    metric: str
    smaller_is_better: bool
    unit: str
    max_length: int
    max_trials: Optional[int]
    max_concurrent_trials: Optional[int]
    # A validation metric the trial reports as its length (searcher.time_metric); lengths are
    # then that metric's values, carried as ``unit`` batches. None: lengths are in ``unit``.
    time_metric: Optional[str] = None
    # The validated section itself (``to_dict()`` form), for the fields only its searcher has
    # (that searcher reads and compares them: equal settings agree in the fields above).
    section: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def length(self) -> TrainUnit:
        """``max_length`` as a :class:`TrainUnit`."""
        return length_from_config({self.unit: self.max_length}, "searcher.max_length")

    @classmethod
    def from_config(cls, searcher: Mapping[str, Any]) -> "SearcherSettings":
        """Read a validated ``searcher`` section (``to_dict()`` form); nothing is checked again.

        The length is ``max_length``; else ``time_metric`` + ``max_time`` (a unit, or batches
        carrying a reported metric's value); else :data:`OWN_LENGTH` (a script's own length).
        """
        time_metric = searcher.get("time_metric")
        if searcher.get("max_length") is not None:
            ((unit, length),) = searcher["max_length"].items()
            time_metric = None
        elif searcher.get("max_time") is None:
            unit, length, time_metric = "batches", OWN_LENGTH, None
        elif time_metric in UNIT_TIME_METRICS:
            unit, length, time_metric = time_metric, searcher["max_time"], None
        else:
            unit, length = "batches", searcher["max_time"]
        return cls(
            name=searcher["name"],
            metric=searcher["metric"],
            smaller_is_better=_or(searcher.get("smaller_is_better"), DEFAULT_SMALLER_IS_BETTER),
            unit=unit,
            max_length=length,
            max_trials=searcher.get("max_trials"),
            max_concurrent_trials=searcher.get("max_concurrent_trials"),
            time_metric=time_metric,
            section=dict(searcher),
        )


@dataclasses.dataclass(frozen=True)
class ExperimentSettings:
    """The fields the experiment runner reads from a validated config, besides the searcher's."""

    slots_per_trial: int = 1  # resources.slots_per_trial (the schema reads Determined's 0 as 1)
    distributed_backend: str = DEFAULT_ENGINE  # resources.distributed_backend
    hosts: Tuple[str, ...] = ()  # resources.hosts (det-lite's own): "host:slots"
    executor: str = DEFAULT_EXECUTOR  # resources.executor (det-lite's own): config._plugins.EXECUTORS
    # A script entrypoint without a Determined launcher runs once, seeing all the trial's slots
    # (as Determined runs it once per container); configs stored before resources.launcher: per slot.
    script_once: bool = False
    max_restarts: int = DEFAULT_MAX_RESTARTS
    experiment_seed: int = 0  # reproducibility.experiment_seed (the schema draws one when unset)

    @classmethod
    def from_config(cls, exp_conf: Mapping[str, Any]) -> "ExperimentSettings":
        """Read a validated config (``to_dict()``); a missing field takes the default above."""
        d = cls()
        return cls(
            slots_per_trial=_or(_get(exp_conf, "resources", "slots_per_trial"), d.slots_per_trial),
            distributed_backend=_or(
                _get(exp_conf, "resources", "distributed_backend"), d.distributed_backend
            ),
            hosts=tuple(_get(exp_conf, "resources", "hosts") or ()),
            executor=_or(_get(exp_conf, "resources", "executor"), d.executor),
            script_once=_script_once(exp_conf),
            max_restarts=_or(_get(exp_conf, "max_restarts"), d.max_restarts),
            experiment_seed=_or(_get(exp_conf, "reproducibility", "experiment_seed"), d.experiment_seed),
        )


def _script_once(exp_conf: Mapping[str, Any]) -> bool:
    """A script entrypoint that names no Determined launcher, on this machine (no hosts)."""
    from determined_lite.config._launcher import script_command

    resources = exp_conf.get("resources")
    if not isinstance(resources, Mapping) or "launcher" not in resources or resources["launcher"]:
        return False
    entrypoint = exp_conf.get("entrypoint")
    if not isinstance(entrypoint, str) or resources.get("hosts"):
        return False
    return script_command(entrypoint) is not None


def _searcher_length(exp_conf: Mapping[str, Any]) -> Any:
    """``searcher.max_length``, or ``{unit: max_time}`` when ``time_metric`` is a unit."""
    length = _get(exp_conf, "searcher", "max_length")
    time_metric, max_time = _get(exp_conf, "searcher", "time_metric"), _get(exp_conf, "searcher", "max_time")
    if length is None and time_metric in UNIT_TIME_METRICS and max_time:
        return {time_metric: max_time}
    return length


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
