"""Warm start: the checkpoint that ``searcher.source_checkpoint_uuid`` or ``source_trial_id``
names, which every new trial of the experiment starts from (Determined's warm start).

``source_checkpoint_uuid``: a checkpoint in det-lite's store, else a directory of that name
under the experiment's checkpoint storage (``host_path[/storage_path]/<uuid>``: where
Determined's ``shared_fs`` storage keeps its checkpoints, so one copied from Determined is found
there). It must be a checkpoint's uuid: an absolute path, ``..`` or a symbolic link in the root
is refused (``storage.checkpoint_dir``), so a config names checkpoints, never other files.
``source_trial_id``: the latest checkpoint of that det-lite trial, as in Determined.
Torch-free: ``experiment create`` checks it before anything is recorded.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from determined_lite.storage import (
    STATE_FILE,
    CheckpointIdError,
    StorageError,
    checkpoint_dir,
    fetch_checkpoint,
)
from determined_lite.store._paths import checkpoint_root


class WarmStartError(ValueError):
    """The warm-start checkpoint named by the config cannot be found (one line: field and why)."""


def warm_start_checkpoint(config: Mapping[str, Any], store: Any) -> Optional[str]:
    """The directory of the config's warm-start checkpoint, None without one."""
    searcher = config.get("searcher") or {}
    uuid, trial_id = searcher.get("source_checkpoint_uuid"), searcher.get("source_trial_id")
    if uuid is not None and trial_id is not None:
        raise WarmStartError(
            "searcher.source_checkpoint_uuid and searcher.source_trial_id: give one of them, not both"
        )
    if uuid is not None:
        found = store.checkpoints.get(str(uuid))
        if found is not None:
            return _fetch(store, found, "searcher.source_checkpoint_uuid")
        root = checkpoint_root(config)
        path = os.path.join(root, str(uuid))
        try:
            if os.path.isfile(os.path.join(checkpoint_dir(root, uuid), STATE_FILE)):
                return path
        except CheckpointIdError as e:
            raise WarmStartError(f"searcher.source_checkpoint_uuid: {e}") from None
        except FileNotFoundError:
            pass
        raise WarmStartError(
            f"searcher.source_checkpoint_uuid: no checkpoint {uuid!r} in det-lite's store, nor a "
            f"checkpoint directory {path} (a Determined checkpoint goes there, with its {STATE_FILE})"
        )
    if trial_id is not None:
        if store.trials.get(int(trial_id)) is None:
            raise WarmStartError(f"searcher.source_trial_id: no trial {trial_id} in det-lite's store")
        checkpoints = store.checkpoints.list(trial_id=int(trial_id))
        if not checkpoints:
            raise WarmStartError(f"searcher.source_trial_id: trial {trial_id} has no checkpoint")
        return _fetch(store, max(checkpoints, key=lambda c: c["total_batches"]), "searcher.source_trial_id")
    return None


def _fetch(store: Any, checkpoint: Mapping[str, Any], field: str) -> str:
    """The checkpoint's local directory; a cloud copy that cannot be fetched (unreachable, or a
    stored name that would land outside it) is a :class:`WarmStartError` naming ``field``."""
    try:
        return fetch_checkpoint(store, checkpoint)
    except StorageError as e:
        raise WarmStartError(f"{field}: checkpoint {checkpoint['uuid']}: {e}") from None
