"""``resources.ray``: where the Ray cluster is and how a trial's slots are placed on it (det-lite's
own fields, read when ``resources.executor`` is ``ray``; ``launch/_ray_cluster.RayOptions``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Dict, Literal, Optional

from pydantic import Field, StrictStr, field_validator

from determined_lite.config._base import Section


class RayConfig(Section):
    """``address``: Ray's (``ray://...``, ``HOST:PORT`` or ``auto``; default ``$RAY_ADDRESS``,
    else ``auto``); ``placement``: ``pack`` (one node when the gang fits, as Determined's
    scheduler) or ``spread``; ``resources_per_slot``: one bundle of the trial's placement group;
    ``placement_timeout``: seconds a gang larger than all the cluster's slots waits for an
    autoscaler's nodes before its trial fails (one that waits for others' work waits on)."""

    label: ClassVar[str] = "ray"

    address: Optional[StrictStr] = None
    placement: Literal["pack", "spread"] = "pack"
    resources_per_slot: Dict[StrictStr, Annotated[float, Field(gt=0, strict=False)]] = Field(
        default_factory=lambda: {"CPU": 1.0}
    )

    placement_timeout: Annotated[float, Field(gt=0, strict=False)] = 600.0

    @field_validator("resources_per_slot")
    @classmethod
    def _some(cls, value: Dict[str, float]) -> Dict[str, float]:
        if not value:
            raise ValueError("resources_per_slot needs at least one resource, e.g. {CPU: 1}")
        return value
