"""Measure 4: validation on 2 workers with several metrics and custom reducers, det-lite vs one
hand-written fused gather; and how many collectives det-lite uses per validation reduction.

The trial's ``evaluate_batch`` returns four metrics with different reducers (``val_loss`` and
``accuracy`` averaged, ``max_logit`` MAX, ``errors`` SUM); it also feeds a ``MetricReducer``
(a confusion matrix -> balanced accuracy and macro precision, ``name=None``) and a function
reducer (per-record losses -> their median, wrapped with ``context.experimental.wrap_reducer``).
The baseline does the same per-batch computations on the same records (each rank its
contiguous half, batches of 64) and ONE ``all_gather_object`` (Horovod: ``hvd.allgather_object``)
of everything, then merges. The trial's learning rate is 0, so both sides evaluate the same
weights and their metrics must agree: a run whose results differ fails.

Timing, on rank 0: det-lite's validation from ``on_validation_start`` to ``on_validation_end``
(the harness's own callbacks, TensorBoard included, run before the probe's);
the baseline's validation runs in a callback at the end of the training batch just before it
(both ranks aligned by an engine barrier first, outside the timing), so each det-lite
validation is paired with a baseline one under the same load. ``Trainer.fit`` trains one batch
between validations. Reported: medians over validations after the first two, and the median of
the paired ratios.

Collectives: the worker's ``DistributedContext`` object collectives (``allgather``,
``broadcast``, ``barrier``, ``gather``) are wrapped to count calls between
``on_validation_start`` and ``on_validation_end``, with the caller (file:function) of each.
Engines: torch.distributed (gloo, via ``torch.distributed.run``) and Horovod (``horovodrun``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # a worker: make the benchmark modules importable
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import (  # noqa: E402
    DET_LITE,
    Row,
    child_env,
    horovodrun_argv,
    log,
    peer_row,
    ratio_row,
    run_child,
    torchrun_argv,
)

from determined_lite import pytorch as det  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOAL = 1.05
COLLECTIVES_GOAL = 1
BATCH = 64
WARMUP = 2
COLLECTIVE_METHODS = ("allgather", "broadcast", "barrier", "gather")
# mode -> (validation records, validations per job)
SIZES: Dict[str, Tuple[int, int]] = {"smoke": (512, 4), "quick": (8192, 16), "full": (32768, 30)}
ENGINES = ("torch", "horovod")


def run(mode: str, repeats: Optional[int] = None, peers: Sequence[str] = ()) -> List[Row]:
    """det-lite's rows per engine, then (``peers``) the torch engine's case with each peer
    framework (``_peer_validation``), in a ``torchrun`` job of its own."""
    records, validations = SIZES[mode]
    validations = (repeats + WARMUP) if repeats else validations
    engines = ENGINES[:1] if mode == "smoke" else ENGINES
    jobs = [(engine, DET_LITE) for engine in engines] + [("torch", framework) for framework in peers]
    rows = []
    for engine, framework in jobs:
        log(f"validation ({engine}, {framework}): 2 workers, {validations} validations of {records} records")
        with tempfile.TemporaryDirectory(prefix="bench-val-") as tmp:
            out = os.path.join(tmp, "results.json")
            args = ["--worker", engine, out, str(records), str(validations), framework]
            script = os.path.abspath(__file__)
            argv = torchrun_argv(script, args) if engine == "torch" else horovodrun_argv(script, args)
            what = f"the {engine} validation job ({framework})"
            run_child(argv, what, timeout=900, env=child_env(1), cwd=tmp)
            with open(out) as f:
                res = json.load(f)
        row = _row(engine, records, res, framework)
        rows.append(row if framework == DET_LITE else peer_row(row, framework))
    return rows


def _row(engine: str, records: int, res: Dict[str, Any], framework: str = DET_LITE) -> Row:
    ours, base = res["det_lite"][WARMUP:], res["baseline"][WARMUP:]
    counts = res["collectives"][WARMUP:]
    if not res["match"]:
        raise RuntimeError(f"{framework} and baseline validation metrics differ: {res['mismatch']}")
    extra: Dict[str, Any] = {
        "collectives": max(counts),
        "collectives_goal": COLLECTIVES_GOAL,
        "workers": 2,
        "records": records,
    }
    if max(counts) > COLLECTIVES_GOAL and framework == DET_LITE:
        extra["collective_sites"] = res["sites"]
        extra["note"] = "collectives at " + ", ".join(res["sites"])
    return ratio_row(
        f"validation_{engine}_2workers", ours, base, GOAL, ratios=[a / b for a, b in zip(ours, base)], **extra
    )


# --- the workers -----------------------------------------------------------------------------------


class ConfusionMatrix(det.MetricReducer):
    """Counts (label, prediction) pairs; across slots: balanced accuracy and macro precision."""

    def __init__(self, classes: int) -> None:
        self.classes = classes
        self.reset()

    def reset(self) -> None:
        self.counts = torch.zeros(self.classes * self.classes, dtype=torch.int64)

    def update(self, labels: torch.Tensor, preds: torch.Tensor) -> None:
        self.counts += torch.bincount(labels * self.classes + preds, minlength=self.classes**2)

    def per_slot_reduce(self) -> Any:
        return self.counts.numpy()

    def cross_slot_reduce(self, per_slot_metrics: List[Any]) -> Any:
        return confusion_metrics(sum(per_slot_metrics).reshape(self.classes, self.classes))


def confusion_metrics(cm: np.ndarray) -> Dict[str, float]:
    diag = np.diag(cm).astype(np.float64)
    recall = diag / np.maximum(cm.sum(axis=1), 1)
    precision = diag / np.maximum(cm.sum(axis=0), 1)
    return {"balanced_accuracy": float(recall.mean()), "macro_precision": float(precision.mean())}


def median_loss(values: List[np.ndarray]) -> float:
    return float(np.median(np.concatenate(values)))


def batch_outputs(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
    """The per-batch computations both sides do."""
    logits = model(x)
    per_record = F.cross_entropy(logits, y, reduction="none")
    preds = logits.argmax(1)
    return {
        "val_loss": per_record.mean(),
        "accuracy": (preds == y).float().mean(),
        "max_logit": logits.max(),
        "errors": (preds != y).sum(),
        "preds": preds,
        "per_record": per_record,
    }


class ValTrial(det.PyTorchTrial):
    """hparams: ``records`` (validation set size); lr 0 so the weights never change."""

    def __init__(self, context: det.PyTorchTrialContext) -> None:
        from _trials import CLASSES, make_model

        self.context = context
        self.model = context.wrap_model(make_model("mlp"))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.0))
        self.cm = context.wrap_reducer(ConfusionMatrix(CLASSES), name=None, for_training=False)
        self.losses = context.experimental.wrap_reducer(median_loss, name="median_loss", for_training=False)
        self.extra_callbacks: Dict[str, det.PyTorchCallback] = {}

    def build_training_data_loader(self) -> det.DataLoader:
        from _trials import make_data

        return det.DataLoader(make_data("mlp", 1024), batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> det.DataLoader:
        from _trials import make_data

        return det.DataLoader(make_data("mlp", self.context.get_hparam("records")), batch_size=BATCH)

    def build_callbacks(self) -> Dict[str, det.PyTorchCallback]:
        return dict(self.extra_callbacks)

    def evaluation_reducer(self) -> Dict[str, det.Reducer]:
        return {
            "val_loss": det.Reducer.AVG,
            "accuracy": det.Reducer.AVG,
            "max_logit": det.Reducer.MAX,
            "errors": det.Reducer.SUM,
        }

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        out = batch_outputs(self.model, x, y)
        self.cm.update(y, out.pop("preds"))
        self.losses.update(out.pop("per_record").numpy())
        return out


def accumulate(model: torch.nn.Module, loader: Any, classes: int) -> Tuple[Any, ...]:
    """The hand-written validation's pass over this rank's records: its partial results
    ``(loss sum, correct, max logit, errors, records, confusion counts, per-record losses)``."""
    loss_sum = correct = 0.0
    max_logit, errors, n = -float("inf"), 0, 0
    cm = torch.zeros(classes * classes, dtype=torch.int64)
    losses = []
    with torch.no_grad():
        for x, y in loader:
            out = batch_outputs(model, x, y)
            b = len(y)
            loss_sum += out["val_loss"].item() * b
            correct += out["accuracy"].item() * b
            max_logit = max(max_logit, out["max_logit"].item())
            errors += int(out["errors"].item())
            n += b
            cm += torch.bincount(y * classes + out["preds"], minlength=classes**2)
            losses.append(out["per_record"].numpy())
    return (loss_sum, correct, max_logit, errors, n, cm.numpy(), losses)


def merge(everyone: Sequence[Tuple[Any, ...]], classes: int) -> Dict[str, Any]:
    """The metrics from every rank's :func:`accumulate` results."""
    total = sum(p[4] for p in everyone)
    metrics = {
        "val_loss": sum(p[0] for p in everyone) / total,
        "accuracy": sum(p[1] for p in everyone) / total,
        "max_logit": max(p[2] for p in everyone),
        "errors": sum(p[3] for p in everyone),
        "median_loss": median_loss([a for p in everyone for a in p[6]]),
    }
    metrics.update(confusion_metrics(sum(p[5] for p in everyone).reshape(classes, classes)))
    return metrics


class Baseline:
    """The hand-written validation: same computations, this rank's records, ONE gather."""

    def __init__(self, engine: str, records: int, rank: int, size: int) -> None:
        from _trials import CLASSES, make_data, make_model

        self.engine, self.classes = engine, CLASSES
        self.model = make_model("mlp").eval()
        share = records // size
        data = torch.utils.data.Subset(make_data("mlp", records), range(rank * share, (rank + 1) * share))
        self.loader = torch.utils.data.DataLoader(data, batch_size=BATCH)

    def validate(self) -> Dict[str, Any]:
        mine = accumulate(self.model, self.loader, self.classes)
        return merge(self.gather(mine), self.classes)  # the one collective

    def gather(self, obj: Any) -> List[Any]:
        if self.engine == "torch":
            import torch.distributed as tdist

            out: List[Any] = [None] * tdist.get_world_size()
            tdist.all_gather_object(out, obj)
            return out
        import horovod.torch as hvd

        return hvd.allgather_object(obj, name="bench.baseline_gather")


class Probe(det.PyTorchCallback):
    """Times det-lite's validations and counts the context's collectives inside them; runs
    the paired baseline validation at the end of each training batch."""

    def __init__(self, dist: Any, baseline: Baseline, engine_barrier: Any) -> None:
        self.dist, self.baseline, self.engine_barrier = dist, baseline, engine_barrier
        self.active = False
        self.count = 0
        self.sites: List[str] = []
        self.det_lite: List[float] = []
        self.base: List[float] = []
        self.counts: List[int] = []
        self.det_metrics: List[Dict[str, Any]] = []
        self.base_metrics: List[Dict[str, Any]] = []
        for name in COLLECTIVE_METHODS:
            setattr(dist, name, self._counting(name, getattr(dist, name)))

    def _counting(self, name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                self.count += 1
                caller = traceback.extract_stack(limit=2)[0]
                site = f"{os.path.relpath(caller.filename, REPO_ROOT)}:{caller.name} ({name})"
                if site not in self.sites:
                    self.sites.append(site)
            return fn(*args, **kwargs)

        return wrapper

    def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
        self.engine_barrier()
        start = time.perf_counter()
        result = self.baseline.validate()
        self.base.append(time.perf_counter() - start)
        self.base_metrics.append(result)

    def on_validation_start(self) -> None:
        self.count = 0
        self.active = True
        self._start = time.perf_counter()

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.det_lite.append(time.perf_counter() - self._start)
        self.active = False
        self.counts.append(self.count)
        self.det_metrics.append(dict(metrics))


def compare_metrics(ours: Dict[str, Any], base: Dict[str, Any]) -> Optional[str]:
    if sorted(ours) != sorted(base):
        return f"metric names {sorted(ours)} vs {sorted(base)}"
    for k in ours:
        if not abs(ours[k] - base[k]) <= 1e-6 * max(1.0, abs(base[k])):
            return f"{k}: det-lite {ours[k]!r} vs baseline {base[k]!r}"
    return None


def worker(engine: str, out: str, records: int, validations: int, framework: str = DET_LITE) -> None:
    """One of the 2 workers; rank 0 writes the timings, counts and the comparison (with a peer
    ``framework``, the peer's validation takes det-lite's place: ``_peer_validation``)."""
    torch.set_num_threads(1)
    if framework != DET_LITE:
        import _peer_validation

        result = _peer_validation.worker(framework, records, validations)
        if result is not None:
            with open(out, "w") as f:
                json.dump(result, f)
        return
    from determined_lite.distributed import initialize

    dist = initialize(engine)
    if engine == "torch":
        import torch.distributed as tdist

        engine_barrier = tdist.barrier
    else:
        import horovod.torch as hvd

        engine_barrier = hvd.barrier
    probe = Probe(dist, Baseline(engine, records, dist.rank, dist.size), engine_barrier)
    with tempfile.TemporaryDirectory(prefix="bench-val-") as workdir:
        info = det.TrialInfo(
            trial_seed=1,
            checkpoint_root=os.path.join(workdir, "checkpoints"),
            tensorboard_path=os.path.join(workdir, "tensorboard"),
        )
        hparams = {"global_batch_size": 64, "records": records}
        with det.init(hparams=hparams, distributed=dist, trial_info=info) as ctx:
            trial = ValTrial(ctx)
            trial.extra_callbacks = {"probe": probe}
            det.Trainer(trial, ctx).fit(
                max_length=det.Batch(validations),
                validation_period=det.Batch(1),
                checkpoint_policy="none",
                progress=False,  # the table (or --json) owns stdout
            )
    mismatch = None
    for ours, base in zip(probe.det_metrics, probe.base_metrics):
        mismatch = mismatch or compare_metrics(ours, base)
    if dist.rank == 0:
        result = {
            "det_lite": probe.det_lite,
            "baseline": probe.base,
            "collectives": probe.counts,
            "sites": probe.sites,
            "match": mismatch is None and len(probe.det_lite) == len(probe.base) == validations,
            "mismatch": mismatch or f"{len(probe.det_lite)} det-lite and {len(probe.base)} baseline runs",
        }
        with open(out, "w") as f:
            json.dump(result, f)
    dist.close()


if __name__ == "__main__":
    worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
