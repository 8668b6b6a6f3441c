"""Step 3: a hyperparameter search. The model and learning rate come from the trial's
hyperparameters (``info.trial.hparams``); validations report ``epochs``, the searcher's
``time_metric``: adaptive ASHA ends a trial's run at each rung (``should_preempt()``) and
resumes the promising ones from their checkpoint."""

import logging
import pathlib

import determined as det
import torch
import torch.nn.functional as F
from _args import parse_args
from digits import Net, datasets, evaluate
from torch.optim.lr_scheduler import StepLR


def train(args, model, loader, optimizer, epoch_idx, core_context) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if (batch_idx + 1) % args.log_interval == 0:
            core_context.train.report_training_metrics(
                steps_completed=(batch_idx + 1) + epoch_idx * len(loader),
                metrics={"train_loss": loss.item()},
            )


def test(model, loader, core_context, steps_completed, epochs_completed) -> float:
    loss, correct, n = evaluate(model, loader)
    # NEW: report the searcher's time_metric (epochs) with the validation metrics.
    metrics = {"test_loss": loss / n, "accuracy": correct / n, "epochs": epochs_completed}
    core_context.train.report_validation_metrics(steps_completed=steps_completed, metrics=metrics)
    return correct / n


def save_state(path: pathlib.Path, model, optimizer, scheduler, epochs_completed: int, trial_id: int) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }
    torch.save(state, path / "checkpoint.pt")
    (path / "state").write_text(f"{epochs_completed},{trial_id}")


def load_state(path: pathlib.Path, model, optimizer, scheduler, trial_id: int) -> int:
    state = torch.load(path / "checkpoint.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    epochs_completed, ckpt_trial_id = (int(f) for f in (path / "state").read_text().split(","))
    return epochs_completed if ckpt_trial_id == trial_id else 0  # another trial's: a warm start


def main(core_context) -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    train_set, test_set = datasets()
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size)
    info = det.get_cluster_info()
    assert info is not None, "run this step with det-lite experiment create adaptive.yaml ."
    # NEW: the trial's hyperparameters.
    hparams = info.trial.hparams
    model = Net(hparams)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=hparams["learning_rate"])
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    epochs_completed = 0
    if info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            epochs_completed = load_state(path, model, optimizer, scheduler, info.trial.trial_id)

    for epoch_idx in range(epochs_completed, args.epochs):
        train(args, model, train_loader, optimizer, epoch_idx, core_context)
        steps_completed = (epoch_idx + 1) * len(train_loader)
        accuracy = test(model, test_loader, core_context, steps_completed, epoch_idx + 1)
        print(f"epoch {epoch_idx + 1}: accuracy {accuracy:.1%}")
        scheduler.step()
        with core_context.checkpoint.store_path({"steps_completed": steps_completed}) as (path, storage_id):
            save_state(path, model, optimizer, scheduler, epoch_idx + 1, info.trial.trial_id)
        # At a rung's end (or when paused) the run stops here; ASHA resumes promising trials.
        if core_context.preempt.should_preempt():
            return


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context)
