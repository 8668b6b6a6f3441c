"""Step 0: a plain PyTorch script, run unchanged by ``det-lite experiment create const.yaml .``.

It knows nothing of Determined: it trains, prints its test accuracy and exits; the experiment
records its logs (``det-lite trial logs``).
"""

import torch
from _args import parse_args
from digits import DEFAULT_HPARAMS, Net, datasets, evaluate, train_epoch
from torch.optim.lr_scheduler import StepLR


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    train_set, test_set = datasets()
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size)
    model = Net(DEFAULT_HPARAMS)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(args.epochs):
        train_epoch(model, train_loader, optimizer)
        loss, correct, n = evaluate(model, test_loader)
        print(f"epoch {epoch + 1}: test loss {loss / n:.4f}, accuracy {correct}/{n} ({correct / n:.1%})")
        scheduler.step()


if __name__ == "__main__":
    main()
