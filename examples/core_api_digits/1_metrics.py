"""Step 1: report metrics with the Core API (``det.core.init()``, ``core_context.train``)."""

import logging

import determined as det
import torch
import torch.nn.functional as F
from _args import parse_args
from digits import DEFAULT_HPARAMS, Net, datasets, evaluate
from torch.optim.lr_scheduler import StepLR


def train(args, model, loader, optimizer, epoch_idx, core_context) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if (batch_idx + 1) % args.log_interval == 0:
            # NEW: report training metrics, at the steps (batches) completed so far.
            core_context.train.report_training_metrics(
                steps_completed=(batch_idx + 1) + epoch_idx * len(loader),
                metrics={"train_loss": loss.item()},
            )


def test(model, loader, core_context, steps_completed) -> float:
    loss, correct, n = evaluate(model, loader)
    # NEW: report validation metrics.
    core_context.train.report_validation_metrics(
        steps_completed=steps_completed, metrics={"test_loss": loss / n, "accuracy": correct / n}
    )
    return correct / n


def main(core_context) -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    train_set, test_set = datasets()
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size)
    model = Net(DEFAULT_HPARAMS)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch_idx in range(args.epochs):
        train(args, model, train_loader, optimizer, epoch_idx, core_context)
        accuracy = test(model, test_loader, core_context, (epoch_idx + 1) * len(train_loader))
        print(f"epoch {epoch_idx + 1}: accuracy {accuracy:.1%}")
        scheduler.step()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    # NEW: the Core API context.
    with det.core.init() as core_context:
        main(core_context)
