"""No orphans: checkpoint directories, run directories and TensorBoard files agree with the store.

Orphans are what a process leaves when it dies at the wrong moment (``<uuid>/`` renamed into
place but never registered, ``.tmp-*``, checkpoints of killed trials) or what outlives its
experiment. A directory is touched only when its writer cannot still use it and its
experiment runs in no other process; the rules, for a root several experiments, stores and
plain-Python runs may share: docs/design.md, "No orphans". A cloud store
(``collect_garbage``): checkpoints no store row names, whose ``metadata.json`` names a
stopped experiment of this store, are deleted (an upload a kill interrupted).

``reconcile_experiment`` runs when a runner starts and after it stopped its trials, and when
``pause``/``kill`` end an experiment whose process was gone; ``delete_experiment_files`` after
``experiment delete``; ``collect_garbage`` is ``det-lite checkpoint gc``. Torch-free.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from determined_lite._enums import TextEnum
from determined_lite.experiment._context import STAGING_PREFIX
from determined_lite.storage import (
    CLOUD_TYPES,
    DELETED_PREFIX,
    STORE_KEY,
    TMP_GRACE_S,
    CheckpointStorage,
    RootEntry,
    StorageError,
    checkpoint_storage,
    make_durable,
    move_aside,
    read_metadata_file,
    remove_in_background,
    root_entries,
    writer_may_be_alive,
)
from determined_lite.store._paths import (
    EXPERIMENTS_DIR,
    checkpoint_root,
    default_checkpoint_root,
    experiment_dir,
    list_names,
    tensorboard_dir,
)
from determined_lite.store._states import ExperimentState, TrialState

_UNFINISHED = (TrialState.ACTIVE, TrialState.PAUSED)
_TENSORBOARD_PREFIX = "experiment_"


class Fate(TextEnum):
    """What a collection does with a directory (or a store row)."""

    KEEP = "kept"
    BUSY = "in use"
    REGISTER = "registered"
    REMOVE = "removed"
    FORGET = "forgotten"


Decision = Tuple[Fate, str]  # what to do, and why


@dataclasses.dataclass
class GcReport:
    """What a collection did (or, with ``dry_run``, would do), one ``(fate, path, why)`` per item."""

    dry_run: bool = False
    actions: List[Tuple[Fate, str, str]] = dataclasses.field(default_factory=list)
    problems: List[str] = dataclasses.field(default_factory=list)  # failures: the caller exits 1
    notes: List[str] = dataclasses.field(default_factory=list)  # what was left alone on purpose

    def count(self, fate: Fate) -> int:
        return sum(1 for f, _, _ in self.actions if f == fate)

    def lines(self) -> List[str]:
        """One line per item, e.g. ``removed /root/<uuid> (experiment 3 was deleted)``."""
        verb = "would be " if self.dry_run else ""
        return [f"{verb}{fate}: {path} ({why})" for fate, path, why in self.actions]

    def summary(self) -> str:
        parts = [f"{self.count(fate)} {fate}" for fate in Fate if fate != Fate.KEEP]
        head = "checkpoint gc (dry run)" if self.dry_run else "checkpoint gc"
        return f"{head}: {', '.join(parts)}"

    def __bool__(self) -> bool:
        return bool(self.actions or self.problems or self.notes)


class _Collector:
    """``defer``: a removed directory is moved aside (``storage.move_aside``) into ``moved``, for
    the caller to remove in the background; else removed at once."""

    def __init__(self, store: Any, dry_run: bool, defer: bool = False) -> None:
        self.store = store
        self.defer = defer
        self.moved: List[str] = []
        self.store_id = os.path.realpath(store.path)
        self.default_root = os.path.realpath(default_checkpoint_root(store.home))
        self.report = GcReport(dry_run=dry_run)
        self.registered: Set[str] = {c["uuid"] for c in store.checkpoints.list()}
        self._clouds: Dict[int, Optional[CheckpointStorage]] = {}

    def cloud(self, experiment_id: int) -> Optional[CheckpointStorage]:
        """The experiment's cloud checkpoint storage (None: a directory, or no such experiment)."""
        if experiment_id not in self._clouds:
            config = (self.store.experiments.get(experiment_id) or {"config": {}})["config"]
            self._clouds[experiment_id] = (
                checkpoint_storage(config, experiment_id) if _is_cloud(config) else None
            )
        return self._clouds[experiment_id]

    # --- decisions ----------------------------------------------------------------------------
    def belongs(self, entry: RootEntry, root: str) -> bool:
        """Whether ``entry`` names an experiment of this store."""
        meta = entry.metadata
        if meta is None or meta.get("experiment_id") is None:
            return False
        if STORE_KEY in meta:
            return bool(meta[STORE_KEY]) and os.path.realpath(meta[STORE_KEY]) == self.store_id
        return os.path.realpath(root) == self.default_root

    def fate(self, entry: RootEntry, root: str) -> Decision:
        meta = entry.metadata
        if entry.temporary:
            if writer_may_be_alive(meta, entry.mtime):
                return Fate.BUSY, "being written"
            return Fate.REMOVE, "an unfinished checkpoint whose writer is gone"
        if meta is None or not self.belongs(entry, root):
            return Fate.KEEP, "not this store's"
        if writer_may_be_alive(meta, entry.mtime):
            return Fate.BUSY, "its writer may still register it"
        experiment_id = int(meta["experiment_id"])
        experiment = self.store.experiments.get(experiment_id)
        if experiment is None:
            return Fate.REMOVE, f"experiment {experiment_id} was deleted"
        if experiment["running"] and experiment["pid"] != os.getpid():
            return Fate.BUSY, f"experiment {experiment_id} is running"
        trial = self.store.trials.get(int(meta.get("trial_id") or 0))
        if trial is None or trial["experiment_id"] != experiment_id:
            return Fate.REMOVE, f"its trial of experiment {experiment_id} is gone"
        if trial["state"] in _UNFINISHED and self._resumable(trial["id"], meta):
            return Fate.REGISTER, f"the latest checkpoint of trial {trial['id']}, never registered"
        return Fate.REMOVE, f"never registered; trial {trial['id']} does not need it"

    def _resumable(self, trial_id: int, meta: Dict[str, Any]) -> bool:
        """A trial may resume from it: newer than its registered checkpoints, and the store's
        metrics reach its batch (no gap would follow)."""
        batches = meta.get("total_batches")
        if not isinstance(batches, int):
            return False
        latest = max((c["total_batches"] for c in self.store.checkpoints.list(trial_id=trial_id)), default=-1)
        return batches > latest and self.store.metrics.has_training_report(trial_id, batches)

    # --- actions ------------------------------------------------------------------------------
    def act(self, fate: Fate, path: str, why: str, entry: Optional[RootEntry] = None) -> None:
        if fate == Fate.KEEP:
            return
        self.report.actions.append((fate, path, why))
        if self.report.dry_run or fate == Fate.BUSY:
            return
        try:
            if fate == Fate.REMOVE and self.defer:
                self.moved.append(move_aside(path))
            elif fate == Fate.REMOVE:
                shutil.rmtree(path, ignore_errors=os.path.basename(path).startswith(DELETED_PREFIX))
                if os.path.lexists(path):
                    raise OSError(f"{path} is still there")
            elif fate == Fate.REGISTER and entry is not None and entry.metadata is not None:
                make_durable(path)
                meta = entry.metadata
                trial_id, batches = int(meta["trial_id"]), meta["total_batches"]
                cloud = self.cloud(int(meta["experiment_id"]))
                if cloud is not None:  # registered only once in the experiment's cloud store
                    cloud.upload(path, entry.uuid)
                metrics = meta.get("validation_metrics")
                self.store.checkpoints.add(trial_id, entry.uuid, path, batches, metrics)
                self.registered.add(entry.uuid)
        except OSError as e:
            verb = "remove" if fate == Fate.REMOVE else "register"
            self.report.problems.append(f"could not {verb} {path}: {e}")

    def sweep_root(self, root: str, only_experiment: Optional[int] = None) -> None:
        """Checkpoint directories of ``root``: all of them, or those naming ``only_experiment``."""
        for entry in root_entries(root):
            if entry.uuid in self.registered and not entry.temporary:
                continue
            if only_experiment is not None:
                meta = entry.metadata or {}
                if meta.get("experiment_id") != only_experiment or not self.belongs(entry, root):
                    continue
            fate, why = self.fate(entry, root)
            self.act(fate, entry.path, why, entry)

    def forget_missing(self, experiment: Dict[str, Any]) -> None:
        """Registered checkpoints of ``experiment`` whose directory is gone (root still there)."""
        if experiment["running"] and experiment["pid"] != os.getpid():
            return
        if _is_cloud(experiment["config"]):  # the local copies of a cloud store come and go
            return
        for c in self.store.checkpoints.list(experiment_id=experiment["id"]):
            path = c["path"]
            if not os.path.isdir(path) and os.path.isdir(os.path.dirname(os.path.normpath(path))):
                self.report.actions.append((Fate.FORGET, path, f"checkpoint {c['uuid']}'s directory is gone"))
                if not self.report.dry_run:
                    self.store.checkpoints.delete(c["uuid"])
                    self.registered.discard(c["uuid"])

    def sweep_cloud(self, experiment: Dict[str, Any]) -> None:
        """Checkpoints in the experiment's cloud store that no one registered (an upload that a
        kill interrupted): removed when their local copy or their metadata names the experiment."""
        cloud = self.cloud(experiment["id"])
        if cloud is None or (experiment["running"] and experiment["pid"] != os.getpid()):
            return
        for uuid in cloud.list_ids():
            if uuid in self.registered:
                continue
            meta = read_metadata_file(cloud.local_path(uuid)) or cloud.read_metadata(uuid) or {}
            owner = meta.get(STORE_KEY)
            if meta.get("experiment_id") != experiment["id"] or (
                owner and os.path.realpath(owner) != self.store_id
            ):
                continue
            self.report.actions.append((Fate.REMOVE, f"{cloud.url}/{uuid}", "uploaded, never registered"))
            if not self.report.dry_run:
                cloud.delete(uuid)

    def sweep_deleted(self, parent: str) -> None:
        """Directories ``experiment delete`` moved aside in ``parent`` that are still there (their
        background remover was killed, or is still at work: removing them twice is harmless)."""
        for name in list_names(parent):
            if name.startswith(DELETED_PREFIX):
                self.act(Fate.REMOVE, os.path.join(parent, name), "moved aside by `experiment delete`")

    def sweep_experiment_dirs(self) -> None:
        """Run directories and TensorBoard directories of experiments the store no longer has,
        and snapshots staged by an ``experiment create`` that died."""
        now = time.time()
        parent = os.path.join(self.store.home, EXPERIMENTS_DIR)
        for name in list_names(parent):
            path = os.path.join(parent, name)
            if name.isdigit() and self.store.experiments.get(int(name)) is None:
                self.act(Fate.REMOVE, path, f"experiment {name} was deleted")
            elif name.startswith(STAGING_PREFIX) and now - _mtime(path) >= TMP_GRACE_S:
                self.act(Fate.REMOVE, path, "a context snapshot staged by a create that died")
        parent = os.path.dirname(tensorboard_dir(0, self.store.home))
        for name in list_names(parent):
            number = name[len(_TENSORBOARD_PREFIX) :]
            if name.startswith(_TENSORBOARD_PREFIX) and number.isdigit():
                if self.store.experiments.get(int(number)) is None:
                    self.act(Fate.REMOVE, os.path.join(parent, name), f"experiment {number} was deleted")


def _is_cloud(config: Dict[str, Any]) -> bool:
    return (config.get("checkpoint_storage") or {}).get("type") in CLOUD_TYPES


def delete_cloud_copies(
    experiment: Dict[str, Any], checkpoints: Iterable[Dict[str, Any]], problems: List[str]
) -> None:
    """Delete an experiment's checkpoints from its cloud store (nothing for a directory)."""
    if not _is_cloud(experiment["config"]):
        return
    try:
        storage = checkpoint_storage(experiment["config"], experiment["id"])
        for c in checkpoints:
            storage.delete(c["uuid"])
    except StorageError as e:
        problems.append(str(e))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def reconcile_experiment(store: Any, experiment_id: int, *, dry_run: bool = False) -> GcReport:
    """Register or remove what the experiment's dead processes left in its checkpoint root, and
    forget registered checkpoints whose directory is gone. Nothing while another process runs it."""
    collector = _Collector(store, dry_run)
    experiment = store.experiments.get(experiment_id)
    if experiment is not None:
        collector.forget_missing(experiment)
        collector.sweep_root(checkpoint_root(experiment["config"]), only_experiment=experiment_id)
    return collector.report


def collect_garbage(store: Any, *, dry_run: bool = False) -> GcReport:
    """``det-lite checkpoint gc``: every experiment of the store, every checkpoint root they use
    (and the home's default one), run and TensorBoard directories of deleted experiments."""
    collector = _Collector(store, dry_run)
    experiments = store.experiments.list(with_config=True)
    roots: List[str] = [default_checkpoint_root(store.home)]
    for experiment in experiments:
        collector.forget_missing(experiment)
        try:
            collector.sweep_cloud(experiment)
        except StorageError as e:
            collector.report.problems.append(str(e))
        root = checkpoint_root(experiment["config"])
        if os.path.realpath(root) not in {os.path.realpath(r) for r in roots}:
            roots.append(root)
    for root in roots:
        collector.sweep_root(root)
        collector.sweep_deleted(root)
    collector.sweep_experiment_dirs()
    for parent in (
        os.path.join(store.home, EXPERIMENTS_DIR),
        os.path.dirname(tensorboard_dir(0, store.home)),
    ):
        collector.sweep_deleted(parent)
    return collector.report


def delete_experiment_files(
    store: Any, experiment: Dict[str, Any], checkpoints: Iterable[Dict[str, Any]]
) -> GcReport:
    """After ``store.experiments.delete``: its registered checkpoints (only ``<uuid>`` directories),
    the unregistered and temporary ones naming it, its TensorBoard files and run directory
    (with the context snapshot). Each is moved aside at once and their files are removed in
    the background: unlinking a 10,000-file context takes the file system seconds."""
    collector = _Collector(store, dry_run=False, defer=True)
    report = collector.report
    checkpoints = list(checkpoints)
    delete_cloud_copies(experiment, checkpoints, report.problems)
    for c in checkpoints:
        path = c["path"]
        if os.path.basename(os.path.normpath(path)) != c["uuid"]:
            report.notes.append(f"left checkpoint {c['uuid']} at {path} (not a <uuid> directory)")
        elif os.path.lexists(path):
            collector.act(Fate.REMOVE, path, f"checkpoint of experiment {experiment['id']}")
    collector.sweep_root(checkpoint_root(experiment["config"]), only_experiment=experiment["id"])
    for path in (tensorboard_dir(experiment["id"], store.home), experiment_dir(experiment["id"], store.home)):
        if os.path.lexists(path):
            collector.act(Fate.REMOVE, path, f"files of experiment {experiment['id']}")
    remove_in_background(collector.moved)
    return report


class DeleteRefused(ValueError):
    """An experiment that cannot be deleted now (it runs, or the model registry names one of its
    checkpoints); the message says why and what to do."""


def check_deletable(store: Any, experiment: Dict[str, Any]) -> None:
    """Raise :class:`DeleteRefused` unless ``experiment`` (a store record) may be deleted: not
    ACTIVE nor run by a process, and none of its checkpoints in the model registry."""
    experiment_id = experiment["id"]
    if experiment["state"] == ExperimentState.ACTIVE or experiment["running"]:
        state = experiment["state"] if experiment["state"] == ExperimentState.ACTIVE else "still running"
        raise DeleteRefused(f"experiment {experiment_id} is {state}; kill or pause it before deleting it")
    registered = store.checkpoints.registered(experiment_id)
    if registered:
        uuid, owner = next(iter(registered.items()))
        more = f" and {len(registered) - 1} more" if len(registered) > 1 else ""
        raise DeleteRefused(
            f"experiment {experiment_id} has checkpoints in the model registry (checkpoint {uuid}: "
            f"{owner}{more}); delete those model versions first"
        )


def delete_experiment(store: Any, experiment: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], GcReport]:
    """Delete ``experiment`` (checked by :func:`check_deletable` first): its records, then its
    files (:func:`delete_experiment_files`); its checkpoints' records and the report."""
    check_deletable(store, experiment)
    checkpoints = store.experiments.delete(experiment["id"])
    return checkpoints, delete_experiment_files(store, experiment, checkpoints)
