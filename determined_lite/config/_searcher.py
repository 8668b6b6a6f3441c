"""``searcher``: the fields every searcher has, their checks, and the settings they give.

Each searcher's own model (its ``name`` and fields such as ``max_trials``) subclasses
:class:`SearcherSection` beside the searcher in ``determined_lite/searcher/``; the searcher
package's registry builds the discriminated union of those models and validates full configs
with it. This package knows no searcher by name: a searcher tells the checks here what it needs
through the class attributes ``needs_length`` and ``needs_count``.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Dict, Optional, Tuple

from pydantic import StrictBool, StrictInt, StrictStr, field_validator, model_validator

from determined_lite.config._base import MaxLength, PositiveInt, Section
from determined_lite.config._determined import determined_only_fields
from determined_lite.config._errors import FieldError
from determined_lite.config._settings import DEFAULT_SMALLER_IS_BETTER, SearcherSettings

LENGTH_NEEDED = (
    "the searcher needs a length: max_length ({batches|records|epochs: n}), or time_metric "
    "(a reported validation metric, or batches|epochs|records) with max_time"
)


class SearcherSection(Section):
    """The common ``searcher`` fields (Determined's); ``to_dict()`` keeps one length form."""

    label: ClassVar[str] = "searcher"
    determined_only: ClassVar[Tuple[str, ...]] = tuple(determined_only_fields(("searcher",)))
    # A length even for a script that could train to its own (rungs need one: adaptive_asha).
    needs_length: ClassVar[bool] = False
    # A ``count`` on every int, double and log hyperparameter (grid).
    needs_count: ClassVar[bool] = False

    name: str
    metric: StrictStr
    smaller_is_better: StrictBool = DEFAULT_SMALLER_IS_BETTER
    max_length: Optional[MaxLength] = None
    time_metric: Optional[StrictStr] = None
    max_time: Optional[PositiveInt] = None
    source_trial_id: Optional[StrictInt] = None
    source_checkpoint_uuid: Optional[StrictStr] = None

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected the name of a validation metric, got ''")
        return value

    @model_validator(mode="after")
    def _one_length(self) -> "SearcherSection":
        """max_length, or time_metric with max_time (or, when allowed, neither)."""
        timed = self.time_metric is not None or self.max_time is not None
        if self.max_length is not None and timed:
            key = "max_time" if self.max_time is not None else "time_metric"
            raise FieldError((key,), "give max_length or time_metric with max_time, not both")
        if self.max_length is None and timed:
            if self.time_metric is None or self.max_time is None:
                missing = "max_time" if self.time_metric is not None else "time_metric"
                raise FieldError((missing,), LENGTH_NEEDED)
            if not self.time_metric.strip():
                raise FieldError(("time_metric",), "expected the name of a validation metric, got ''")
        if self.needs_length and self.max_length is None and self.max_time is None:
            raise FieldError(("max_length",), LENGTH_NEEDED)
        return self

    def to_dict(self) -> Dict[str, Any]:
        out = copy.deepcopy(self.model_dump())
        for key in ("max_length", "time_metric", "max_time"):  # one length form is stored
            if out[key] is None:
                del out[key]
        return out

    def settings(self) -> SearcherSettings:
        """The typed settings the searchers use."""
        return SearcherSettings.from_config(self.to_dict())
