"""``resources``: slots, the distributed engine, the executor, hosts and DDP options (det-lite's own fields
beside Determined's ``slots_per_trial``)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Dict, List, Mapping, Optional, Tuple

from pydantic import Field, StrictBool, StrictStr, field_validator, model_validator

from determined_lite.config._base import NonNegativeInt, Section
from determined_lite.config._determined import determined_only_fields
from determined_lite.config._errors import FieldError, describe
from determined_lite.config._plugins import DEFAULT_ENGINE, DEFAULT_EXECUTOR, ENGINES, EXECUTORS, check_name
from determined_lite.config._ray import RayConfig


def parse_host(entry: Any) -> Tuple[str, int]:
    """``"host:slots"`` -> ``(host, slots)``; ValueError naming the expected form otherwise."""
    if isinstance(entry, str):
        host, sep, slots = entry.strip().rpartition(":")
        if sep and host and slots.isdigit() and int(slots) >= 1:
            return host, int(slots)
    raise ValueError(f"expected 'host:slots' with slots a positive int, got {describe(entry)}")


# Where the launcher hands a trial's validated DDP options to its torch.distributed workers.
DDP_OPTIONS_ENV = "DET_LITE_DDP_OPTIONS"

class DDPOptions(Section):
    """``resources.ddp_options``: passed to torch's DistributedDataParallel (torch backend)."""

    label: ClassVar[str] = "ddp_options"

    find_unused_parameters: StrictBool = False
    broadcast_buffers: StrictBool = True
    gradient_as_bucket_view: StrictBool = False
    bucket_cap_mb: Annotated[float, Field(gt=0)] = 25.0
    static_graph: StrictBool = False


def check_ddp_options(options: Any, where: str = "resources.ddp_options") -> Dict[str, Any]:
    """Validated copy of DDP options given outside a config (``$DET_LITE_DDP_OPTIONS``, a caller).

    :class:`DDPOptions` decides what is valid (names, types, bounds); only the options given are
    returned, as given. Errors are one ``ValueError`` worded for ``where`` (no defaults filled
    in, and ``null`` is not "the default" here).
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"{where} must be a mapping of DDP options, got {type(options).__name__}")
    fields = DDPOptions.model_fields
    for key, value in options.items():
        if key not in fields:
            raise ValueError(f"{where}: unknown option {key!r}; expected one of {sorted(fields)}")
        try:
            if value is None:
                raise ValueError("null")
            DDPOptions.model_validate({key: value})
        except ValueError:  # pydantic's ValidationError is one
            expected = "true or false" if fields[key].annotation is bool else "a positive number"
            raise ValueError(f"{where}.{key} must be {expected}, got {value!r}") from None
    return dict(options)


class ResourcesConfig(Section):
    label: ClassVar[str] = "resources"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("resources",)))

    slots_per_trial: NonNegativeInt = 1
    distributed_backend: StrictStr = DEFAULT_ENGINE  # a name in config._plugins.ENGINES
    hosts: Optional[List[StrictStr]] = None
    executor: StrictStr = DEFAULT_EXECUTOR  # where trials run: a name in config._plugins.EXECUTORS
    ddp_options: DDPOptions = Field(default_factory=DDPOptions)
    ray: RayConfig = Field(default_factory=RayConfig)
    # det-lite's record of the Determined launcher the entrypoint named (set by
    # normalize_launcher): a script without one runs once per trial, seeing all its slots.
    launcher: Optional[StrictStr] = None  # an engine's determined_launcher (config._plugins.ENGINES)

    @field_validator("distributed_backend")
    @classmethod
    def _engine(cls, name: str) -> str:
        return check_name(name, ENGINES)

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, module: Optional[str]) -> Optional[str]:
        launchers = {e.determined_launcher: e for e in ENGINES.values() if e.determined_launcher}
        return None if module is None else check_name(module, launchers)

    @field_validator("executor")
    @classmethod
    def _executor(cls, name: str) -> str:
        return check_name(name, EXECUTORS)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: Optional[List[str]]) -> Optional[List[str]]:
        if not hosts:
            return None
        seen: Dict[str, int] = {}
        for i, entry in enumerate(hosts):
            try:
                host, _ = parse_host(entry)
            except ValueError as e:
                raise FieldError((i,), str(e)) from None
            if host in seen:
                raise FieldError((i,), f"host {host!r} is already listed at hosts[{seen[host]}]")
            seen[host] = i
        return [h.strip() for h in hosts]

    @model_validator(mode="after")
    def _slots(self) -> "ResourcesConfig":
        if self.slots_per_trial == 0:
            self.slots_per_trial = 1
        if self.hosts:
            total = sum(parse_host(h)[1] for h in self.hosts)
            if total != self.slots_per_trial:
                raise FieldError(
                    ("hosts",),
                    f"the hosts' slots add up to {total}, but slots_per_trial is {self.slots_per_trial}",
                )
        return self
