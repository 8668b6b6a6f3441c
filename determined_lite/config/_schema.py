"""The experiment config schema: Determined's fields that matter locally, with Determined's defaults.

Decisions where det-lite differs from (or has to choose within) Determined:

- ``entrypoint`` is stored as ``module:Class`` or a script's command (``python3 train.py ARGS``).
  Determined's launcher form (``python3 -m determined.launch.torch_distributed --trial
  model_def:Trial`` or ``... python3 train.py``, string or list) is rewritten to its trial class
  or script before validation, and the launcher sets ``resources.distributed_backend`` (see
  ``_launcher.normalize_launcher``).

- ``searcher``: the fields every searcher shares are ``SearcherSection`` (``_searcher.py``);
  each searcher's own model sits beside it in ``determined_lite/searcher/``, whose registry
  validates whole configs with their union (``searcher.validate_config``).
- Every searcher needs a length: ``searcher.max_length`` as ``{batches|records|epochs: n}``
  with ``n >= 1`` (a bare integer, older Determined, is read as batches), or Determined's
  current form ``time_metric`` + ``max_time``: a ``time_metric`` of ``batches``, ``epochs`` or
  ``records`` is that unit; any other names a validation metric that a script reports, which
  ends a run once it reaches the length asked (det-lite's searchers then count in it). Lengths in epochs
  work without ``records_per_epoch``: det-lite measures an epoch as one pass over the trial's
  training DataLoader (``records_per_epoch`` is kept, default 0 = unknown).
- ``min_validation_period`` / ``min_checkpoint_period``: unset or ``{unit: 0}`` normalise to
  ``None`` (no periodic validation / checkpoint), which is what Determined's ``{batches: 0}``
  default means.
- ``reproducibility.experiment_seed``: when unset, a random seed in ``[0, 2**31)`` is drawn at
  validation (Determined uses the clock) and stays in ``to_dict()``, so the stored config
  fixes it for the experiment's lifetime.
- ``checkpoint_storage``: Determined's five types (``shared_fs``, ``directory``, ``s3``, ``gcs``,
  ``azure``) with their own fields; a field of another type is an error. ``shared_fs``'s
  ``host_path`` is optional (unset: ``$DET_LITE_HOME/checkpoints``); paths expand ``~`` and must
  be absolute. Cloud types keep their local copies (the cache) in ``$DET_LITE_HOME/checkpoints``.
- ``resources``: ``slots_per_trial: 0`` (Determined: one process without a GPU) is read as 1.
  ``distributed_backend`` (an engine of ``_plugins.ENGINES``), ``executor`` (an executor of
  ``_plugins.EXECUTORS``, default ``local``), ``hosts`` (``"host:slots"``, slots adding up to
  ``slots_per_trial``) and ``ddp_options`` (torch's DistributedDataParallel defaults) are
  det-lite's own.
- ``optimizations.average_training_metrics`` defaults to true (current Determined docs).
- ``environment.environment_variables``: a list (all devices) or ``{cpu, cuda, rocm, gpu}``
  lists (``gpu`` is Determined's old name for ``cuda``), normalised to ``{cpu, cuda, rocm}``.
- ``global_batch_size`` is a required hyperparameter of trial classes (optional for scripts):
  a positive integer, or an int / categorical hyperparameter of positive integers; constant
  and categorical values must be divisible by ``slots_per_trial`` (int ranges are checked
  when a trial's value is drawn).
"""

from __future__ import annotations

import copy
import difflib
import random
import re
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

from pydantic import (
    BeforeValidator,
    Field,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from determined_lite._timeouts import seconds_env_problem
from determined_lite.config._base import (
    NonNegativeInt,
    Period,
    PositiveInt,
    Section,
    check_json,
    check_numbers,
)
from determined_lite.config._determined import determined_only_fields, split_unused
from determined_lite.config._errors import (
    ConfigError,
    FieldError,
    describe,
    first_error,
    format_path,
)
from determined_lite.config._hparams import iter_leaves, normalize_hyperparameters
from determined_lite.config._launcher import (
    SUPPORTED_ENTRYPOINTS,
    TRIAL_CLASS,
    normalize_launcher,
    script_command,
)
from determined_lite.config._resources import ResourcesConfig
from determined_lite.config._searcher import LENGTH_NEEDED, SearcherSection
from determined_lite.config._settings import (
    COMPILE_MODES,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_SCHEDULING_UNIT,
    UNIT_TIME_METRICS,
    CheckpointPolicy,
    SearcherSettings,
    TrainingSettings,
)
from determined_lite.config._storage import STORAGE_FIELDS, CheckpointStorageConfig
from determined_lite.config._yaml import apply_overrides, read_yaml

_Model = TypeVar("_Model", bound="ExperimentConfig")
_T = TypeVar("_T")


def _entrypoint(value: Any) -> str:
    if isinstance(value, str) and TRIAL_CLASS.fullmatch(value.strip()):
        return value.strip()
    script = script_command(value) if isinstance(value, str) else None
    if script is None:
        raise FieldError((), f"{SUPPORTED_ENTRYPOINTS}, got {describe(value)}")
    return script.command()


def _json_mapping(value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise FieldError((), f"expected a mapping, got {describe(value)}")
    check_json(value)
    return copy.deepcopy(value)


# ------------------------------------------------------------------------------------------- others


class CompileConfig(Section):
    """``optimizations.compile`` (det-lite's own): ``torch.compile`` the wrapped models with a
    static-graph contract (see ``CompileSettings`` and ``determined_lite/pytorch/_compile.py``)."""

    label: ClassVar[str] = "optimizations.compile"

    enabled: StrictBool = False
    mode: Optional[Literal[COMPILE_MODES]] = None  # type: ignore[valid-type]
    backend: Annotated[StrictStr, Field(min_length=1)] = "inductor"
    fullgraph: StrictBool = False
    dynamic: StrictBool = False
    retrace_every_iteration: StrictBool = False

    @model_validator(mode="after")
    def _mode_backend(self) -> "CompileConfig":
        if self.mode is not None and self.backend != "inductor":
            raise FieldError(("mode",), f"applies to backend 'inductor' only, got backend {self.backend!r}")
        return self


def _compile(value: Any) -> Any:
    """``compile: true`` / ``false`` is short for ``{enabled: ...}``."""
    return {"enabled": value} if isinstance(value, bool) else value


class OptimizationsConfig(Section):
    label: ClassVar[str] = "optimizations"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("optimizations",)))

    aggregation_frequency: PositiveInt = 1
    average_aggregated_gradients: StrictBool = True
    average_training_metrics: StrictBool = True
    compile: Annotated[CompileConfig, BeforeValidator(_compile)] = Field(default_factory=CompileConfig)


class ProfilingConfig(Section):
    """Determined's ``profiling``: det-lite runs its ``Profiler`` callback (``torch.profiler``)
    over batches ``begin_on_batch``..``end_after_batch`` when ``enabled``."""

    label: ClassVar[str] = "profiling"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("profiling",)))

    enabled: StrictBool = False
    begin_on_batch: NonNegativeInt = 0
    end_after_batch: Optional[NonNegativeInt] = None

    @model_validator(mode="after")
    def _range(self) -> "ProfilingConfig":
        if self.end_after_batch is not None and self.end_after_batch < self.begin_on_batch:
            raise FieldError(
                ("end_after_batch",),
                f"must be >= begin_on_batch ({self.begin_on_batch}), got {self.end_after_batch}",
            )
        return self


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _module_names(value: Any) -> List[str]:
    if not isinstance(value, list):
        raise FieldError((), f"expected a list of Python module names, got {describe(value)}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            raise FieldError(
                (i,),
                f"expected a module name such as 'my_callbacks' or 'pkg.callbacks', got {describe(name)}",
            )
    return list(value)


class DetLiteConfig(Section):
    """det-lite's own settings (no Determined equivalent).

    ``callback_modules``: modules every worker imports before training (from the context
    directory, then the environment); importing one registers global callbacks
    (``register_global_callback``), which then run in every trial of the experiment.
    """

    label: ClassVar[str] = "det_lite"

    callback_modules: Annotated[List[str], PlainValidator(_module_names)] = Field(default_factory=list)


def new_experiment_seed() -> int:
    """A fresh experiment seed (OS randomness; the clock would collide for same-second experiments)."""
    return random.SystemRandom().randrange(2**31)


class ReproducibilityConfig(Section):
    label: ClassVar[str] = "reproducibility"

    experiment_seed: Annotated[StrictInt, Field(ge=0, le=2**32 - 1)] = Field(
        default_factory=new_experiment_seed
    )


ENV_DEVICES = ("cpu", "cuda", "rocm")


def _key_values(items: Any, loc: Tuple[Any, ...]) -> List[str]:
    if not isinstance(items, list):
        raise FieldError(loc, f"expected a list of 'KEY=VALUE' strings, got {describe(items)}")
    for i, item in enumerate(items):
        if not (isinstance(item, str) and "=" in item and item.split("=", 1)[0].strip()):
            raise FieldError(loc + (i,), f"expected 'KEY=VALUE', got {describe(item)}")
        key, _, text = item.partition("=")
        problem = seconds_env_problem({key.strip(): text}, where="")
        if problem:
            raise FieldError(loc + (i,), problem.removeprefix(": "))
    return list(items)


def _environment_variables(value: Any) -> Dict[str, List[str]]:
    if isinstance(value, list):
        items = _key_values(value, ())
        return {device: list(items) for device in ENV_DEVICES}
    if not isinstance(value, dict):
        raise FieldError(
            (), f"expected a list of 'KEY=VALUE' strings or {{cpu|cuda|rocm: [...]}}, got {describe(value)}"
        )
    per_device: Dict[str, List[str]] = {device: [] for device in ENV_DEVICES}
    for key, items in value.items():
        if key not in ENV_DEVICES + ("gpu",):
            raise FieldError((key,), "unknown field; expected cpu, cuda, rocm or gpu (an alias of cuda)")
        if items is not None:
            per_device["cuda" if key == "gpu" else key].extend(_key_values(items, (key,)))
    return per_device


class EnvironmentConfig(Section):
    label: ClassVar[str] = "environment"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("environment",)))

    environment_variables: Annotated[Dict[str, List[str]], PlainValidator(_environment_variables)] = Field(
        default_factory=lambda: {device: list[str]() for device in ENV_DEVICES}
    )


# --------------------------------------------------------------------------------------- experiment

if TYPE_CHECKING:
    PolicyName = str
else:  # the values of CheckpointPolicy, in its order (error messages list them)
    PolicyName = Literal[tuple(policy.value for policy in CheckpointPolicy)]


class ExperimentConfig(Section):
    """A validated experiment config. ``to_dict()`` is what the store keeps and workers receive."""

    label: ClassVar[str] = "experiment config"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(()))

    name: Optional[StrictStr] = None
    description: Optional[StrictStr] = None
    entrypoint: Annotated[str, PlainValidator(_entrypoint)]
    # Optional: a script may have none (a trial class needs global_batch_size: _cross_checks).
    hyperparameters: Annotated[Dict[str, Any], PlainValidator(normalize_hyperparameters)] = Field(
        default_factory=dict
    )
    # The common fields; validate_experiment's model narrows this to the searchers' union.
    searcher: SearcherSection
    records_per_epoch: NonNegativeInt = 0
    min_validation_period: Period = None
    min_checkpoint_period: Period = None
    scheduling_unit: PositiveInt = DEFAULT_SCHEDULING_UNIT
    perform_initial_validation: StrictBool = False
    checkpoint_policy: PolicyName = CheckpointPolicy.BEST.value
    max_restarts: NonNegativeInt = DEFAULT_MAX_RESTARTS
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    optimizations: OptimizationsConfig = Field(default_factory=OptimizationsConfig)
    checkpoint_storage: CheckpointStorageConfig = Field(default_factory=CheckpointStorageConfig)
    reproducibility: ReproducibilityConfig = Field(default_factory=ReproducibilityConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    profiling: ProfilingConfig = Field(default_factory=ProfilingConfig)
    det_lite: DetLiteConfig = Field(default_factory=DetLiteConfig)
    data: Annotated[Dict[str, Any], PlainValidator(_json_mapping)] = Field(default_factory=dict)

    _unused_fields: List[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _cross_checks(self) -> "ExperimentConfig":
        script = script_command(self.entrypoint) is not None
        if "global_batch_size" in self.hyperparameters or not script:
            # Optional for scripts, as in Determined: a Core API loop batches its own data.
            _check_global_batch_size(self.hyperparameters, self.resources.slots_per_trial)
        searcher = self.searcher
        if searcher.max_length is None and searcher.max_time is None and not script:
            # Only a script may train to its own length (and only when no rungs need one).
            raise FieldError(("searcher", "max_length"), LENGTH_NEEDED)
        if searcher.time_metric not in (None,) + UNIT_TIME_METRICS and not script:
            raise FieldError(
                ("searcher", "time_metric"),
                f"{searcher.time_metric!r} is not batches, epochs or records: a trial class trains by "
                "those units; a time metric of your own needs a script that reports it in its "
                "validation metrics",
            )
        if searcher.needs_count:
            _check_counts(self.hyperparameters, searcher.name)
        return self

    @property
    def unused_fields(self) -> List[str]:
        """Determined fields present in the config that det-lite accepted but does not use."""
        return list(self._unused_fields)

    def to_dict(self) -> Dict[str, Any]:
        """A plain JSON-able dict with every default filled in (valid input for validation again)."""
        out = self.model_dump()
        out["searcher"] = self.searcher.to_dict()
        storage = out["checkpoint_storage"]  # another type's (unset) fields are left out
        own = STORAGE_FIELDS[storage["type"]]
        out["checkpoint_storage"] = {k: v for k, v in storage.items() if v is not None or k in own}
        return copy.deepcopy(out)

    def training_settings(self) -> TrainingSettings:
        """The fields the training loop uses, typed (what the worker spec carries)."""
        return TrainingSettings.from_config(self.to_dict())

    def searcher_settings(self) -> SearcherSettings:
        """The ``searcher`` section as the searchers use it."""
        return self.searcher.settings()


def _check_global_batch_size(hparams: Dict[str, Any], slots: int) -> None:
    loc: Tuple[Any, ...] = ("hyperparameters", "global_batch_size")
    gbs = hparams.get("global_batch_size")
    if gbs is None:
        what = "the batch size summed over all slots (per-slot batch = global_batch_size / slots_per_trial)"
        close = difflib.get_close_matches("global_batch_size", [str(k) for k in hparams], n=1, cutoff=0.8)
        if close:  # a misspelling (``global_batch_sizé``): named, not reported missing
            message = f"did you mean 'global_batch_size', a required hyperparameter: {what}"
            raise FieldError(loc[:1] + (close[0],), message)
        raise FieldError(loc, f"missing required hyperparameter: {what}")
    kind = gbs.get("type")
    if kind == "int":
        if gbs["minval"] < 1:
            raise FieldError(loc + ("minval",), f"expected a positive int, got {gbs['minval']}")
        return
    if kind == "const":
        values: List[Tuple[Tuple[Any, ...], Any]] = [(loc, gbs["val"])]
    elif kind == "categorical":
        values = [(loc + ("vals", i), v) for i, v in enumerate(gbs["vals"])]
    else:
        raise FieldError(
            loc, "expected a positive int (or an int or categorical hyperparameter of positive ints)"
        )
    for where, value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FieldError(where, f"expected a positive int, got {describe(value)}")
        if value % slots:
            raise FieldError(
                where,
                f"{value} is not divisible by resources.slots_per_trial ({slots}); "
                "each slot gets an equal share",
            )


def _check_counts(hparams: Dict[str, Any], searcher: str) -> None:
    """A ``count`` on every int, double and log hyperparameter (a searcher with ``needs_count``)."""
    for loc, leaf in iter_leaves(hparams):
        if leaf["type"] in ("int", "double", "log") and leaf["count"] is None:
            raise FieldError(
                ("hyperparameters",) + loc + ("count",),
                f"the {searcher} searcher needs count "
                f"(how many values to take from this {leaf['type']} range)",
            )


def validate_experiment(model: Type[_Model], raw: Mapping[str, Any], source: str = "<config>") -> _Model:
    """Validate a parsed config with ``model`` (an ExperimentConfig whose ``searcher`` field is
    the searchers' union: ``determined_lite.searcher.validate_config``); raise ConfigError
    naming ``source`` and the field."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"expected a mapping at the top level, got {describe(raw)}", source=source)
    clean, unused = split_unused(raw)
    try:
        clean = normalize_launcher(clean)
    except FieldError as e:
        raise ConfigError(e.message, path=format_path(e.loc), source=source) from None
    config = validate_value(model.model_validate, clean, source)
    config._unused_fields = unused
    return config


def validate_value(validate: Callable[[Any], _T], raw: Any, source: str, prefix: Tuple[Any, ...] = ()) -> _T:
    """``validate(raw)``, errors as one ConfigError naming the field below ``prefix``."""
    try:
        check_numbers(raw)
        return validate(raw)
    except FieldError as e:
        raise ConfigError(e.message, path=format_path(prefix + e.loc), source=source) from None
    except ValidationError as e:
        loc, message = first_error(e, prefix)
        raise ConfigError(message, path=format_path(loc), source=source) from None


def read_config(path: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """Read ``path`` (YAML) and apply ``--config key.sub=value`` overrides (values read as YAML)."""
    return apply_overrides(read_yaml(path), overrides)


def environment_variables(exp_conf: Mapping[str, Any], device: str = "cpu") -> Dict[str, str]:
    """The ``KEY=VALUE`` variables of a normalised config (``to_dict()``) for ``cpu|cuda|rocm``, as a dict."""
    items = exp_conf.get("environment", {}).get("environment_variables", {}).get(device, [])
    return dict(item.split("=", 1) for item in items)
