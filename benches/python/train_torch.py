"""PyTorch baseline of benches/train_throughput.rs: tokens per second of training steps
(forward, backward, clipping at 1.0, torch.optim.AdamW) of the PyTorch versions of cwm's
models, on the CPU or a GPU.

    python3 train_torch.py --arch slice --size d128 --batch 32 --seq 128 \
        --warmup 2 --steps 5 --threads 2 [--device cuda]

Prints one JSON object: {"tokens_per_s", "median_step_s", "steps", "threads", "torch"}.
A step ends when its loss and gradient norm have been read back, so GPU work is counted.
The batch is fixed: START then pseudo-random move ids, random targets, no padding; dropout on
(training mode); the loss is the reference's state loss (spec A.4).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crates/models/python"))
import cwm_torch_models as models  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=models.FAMILIES)
    parser.add_argument("--size", default="d128", choices=sorted(models.SIZES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = models.build(args.arch, args.size).to(device)
    model.train()
    moves = torch.randint(0, 20480, (args.batch, args.seq))
    moves[:, 0] = models.START
    moves = moves.to(device)
    classes = []
    for _, n_labels, n_classes in models.LABEL_GROUPS:
        classes += [n_classes] * n_labels
    targets = torch.stack(
        [torch.randint(0, c, (args.batch, args.seq)) for c in classes], dim=-1
    ).to(device)
    valid = torch.ones(args.batch, args.seq, dtype=torch.bool, device=device)
    # The train stage's step: AdamW (beta2 0.95, weight decay 0.01) after clipping at 1.0.
    optim = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01, eps=1e-8
    )

    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optim.zero_grad(set_to_none=True)
        loss = models.state_loss(model(moves), targets, valid)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        value = loss.item() + 0.0 * grad_norm.item()  # both read back, as cwm does
        seconds = time.perf_counter() - start
        if not torch.isfinite(torch.tensor(value)):
            sys.exit(f"loss is {value} at step {step}")
        if step >= args.warmup:
            times.append(seconds)
    median = statistics.median(times)
    print(
        json.dumps(
            {
                "tokens_per_s": args.batch * args.seq / median,
                "median_step_s": median,
                "steps": args.steps,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
