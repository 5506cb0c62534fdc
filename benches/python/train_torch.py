"""PyTorch side of cwm's training-throughput comparisons: tokens per second of training steps
(forward, the state loss, backward, clipping at 1.0, torch.optim.AdamW) on the CPU or a GPU.

    python3 train_torch.py --arch slice --size d128 --batch 32 --seq 128 \
        --warmup 2 --steps 5 --threads 2 [--device cuda] [--stack reference]

Two stacks:

* ``eager`` (the default): cwm's own PyTorch versions of the models
  (``crates/models/python/cwm_torch_models.py``; the recurrences as plain loops, SLiCE as a
  chunked scan), in fp32. The baseline of ``benches/train_throughput.rs``.
* ``reference``: the models built from the libraries the reference imports
  (``crates/models/python/reference_stack.py``), with the reference's precision on a GPU: TF32
  matrix products (``allow_tf32``, float32 matmul precision "high") and, for Mamba-3, the
  forward pass and loss under bf16 autocast (spec D.1). The baseline of docs/gpu.md.

Two step protocols (``--step``; the default is ``lean`` for the eager stack, ``reference`` for
the reference stack):

* ``lean``: the loss and the gradient norm are read back once, at the end of the step.
* ``reference``: the checks of the reference's training loop (spec D.1 step 5 and 7): the loss
  is read back before the backward pass, the gradient norm after clipping, and every
  parameter is tested for finiteness after the update, one read-back per parameter, as its
  ``model_has_nonfinite_params`` does.

``--profile FILE`` runs the timed steps under ``torch.profiler`` and writes its table of
operators (on a GPU, sorted by their own device time, the kernels' share of a step; on the
CPU by their own CPU time) to FILE: the reference's side of cwm's kernel profile
(``CWM_KERNEL_PROFILE``, ``kernel_profile.py``). The timed steps' figures are then the
profiled ones, slower than without.

After the timed steps, ``--phase-steps`` more (3 by default) wait for the device after each of
their phases, the body's forward pass, the output head with the loss, the backward pass, and
clipping with the update and its read-backs: their seconds are the JSON's ``phase_s``, as
``cwm model bench``'s.

Prints one JSON object with ``tokens_per_s``, ``median_step_s``, ``step_s``, the settings, and
on a GPU ``peak_allocated_bytes`` and ``peak_reserved_bytes`` (PyTorch's allocator's peaks
over the warm-up and timed steps; ``null`` on the CPU). A step ends when its last read-back is
done, so GPU work is counted. The batch is fixed: START then pseudo-random move ids, random
targets, no padding; dropout on (training mode); the loss is the reference's state loss (spec
A.4).
"""

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crates/models/python"))
import cwm_torch_models as models  # noqa: E402


def build_model(args):
    if args.stack == "reference":
        import reference_stack

        return reference_stack.build(args.arch, args.size)
    return models.build(args.arch, args.size)


def synthetic_batch(batch, seq, device):
    moves = torch.randint(0, 20480, (batch, seq))
    moves[:, 0] = models.START
    classes = []
    for _, n_labels, n_classes in models.LABEL_GROUPS:
        classes += [n_classes] * n_labels
    targets = torch.stack([torch.randint(0, c, (batch, seq)) for c in classes], dim=-1)
    valid = torch.ones(batch, seq, dtype=torch.bool)
    return moves.to(device), targets.to(device), valid.to(device)


def reference_precision(args, device):
    """TF32 matrix products on a GPU, and the autocast context of the forward pass (bf16 for
    Mamba-3 on a GPU), as the reference's training loop sets them (spec D.1)."""
    if args.stack != "reference" or device.type != "cuda":
        return "fp32", contextlib.nullcontext
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    if args.arch == "mamba3":
        return "tf32+bf16-autocast", lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return "tf32", contextlib.nullcontext


def forward_loss(model, optim, batch, autocast):
    """Zeroes the gradients and returns the state loss of ``batch`` (under ``autocast``)."""
    moves, targets, valid = batch
    optim.zero_grad(set_to_none=True)
    with autocast():
        return models.state_loss(model(moves), targets, valid)


def lean_step(model, optim, batch, autocast, mark=lambda: None):
    """Returns the loss; the loss and the gradient norm are read back at the end. ``mark`` is
    called after the forward pass with the loss and after the backward pass (``Phases``)."""
    loss = forward_loss(model, optim, batch, autocast)
    mark()
    loss.backward()
    mark()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optim.step()
    return loss.item() + 0.0 * grad_norm.item()


def reference_step(model, optim, batch, autocast, mark=lambda: None):
    """Returns the loss; reads back as the reference's loop does (spec D.1 steps 5 and 7).
    ``mark`` as ``lean_step``'s."""
    loss = forward_loss(model, optim, batch, autocast)
    if not torch.isfinite(loss.detach()).item():
        return float("nan")
    mark()
    loss.backward()
    mark()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not math.isfinite(float(grad_norm)):
        return float("nan")
    optim.step()
    if any(not torch.isfinite(p).all() for p in model.parameters()):
        return float("nan")
    return loss.item()


class Phases:
    """A step's four phases (the body's forward pass, up to the output head's input; the head
    and the loss; the backward pass; clipping with the update and its read-backs), each ended
    by a wait for the device: as cwm's ``phase_s``. The first ends where the model calls its
    ``output_head`` (a hook on it)."""

    def __init__(self, device, model):
        self.device = device
        self.marks = []
        model.output_head.register_forward_pre_hook(self.hook)
        self.on = False

    def hook(self, _module, _inputs):
        if self.on:
            self.mark()

    def mark(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.marks.append(time.perf_counter())

    def step(self, step, *step_args):
        """Runs ``step`` with marks between its phases; returns its loss and its phases'
        seconds."""
        self.marks, self.on = [time.perf_counter()], True
        try:
            loss = step(*step_args, mark=self.mark)
        finally:
            self.on = False
        self.mark()
        if len(self.marks) != 5:  # a non-finite loss returned before the update
            return loss, None
        start, forward, head, backward, end = self.marks
        return loss, {
            "forward_s": forward - start,
            "loss_s": head - forward,
            "backward_s": backward - head,
            "update_s": end - backward,
        }


class Profiler:
    """torch.profiler over the timed steps, and its table of operators for ``--profile``."""

    def __init__(self, args, device):
        activities = [torch.profiler.ProfilerActivity.CPU]
        self.sort_by = "self_cpu_time_total"
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.sort_by = "self_device_time_total"
        self.profile = torch.profiler.profile(activities=activities)

    def start(self):
        self.profile.start()

    def write(self, args):
        self.profile.stop()
        table = self.profile.key_averages().table(sort_by=self.sort_by, row_limit=args.profile_rows)
        head = (
            f"torch.profiler, {args.stack} stack, {args.arch} {args.size}, batch {args.batch} x "
            f"{args.seq}: the {args.steps} timed step(s) together (divide by {args.steps} for "
            f"one), sorted by {self.sort_by}, torch {torch.__version__}\n\n"
        )
        args.profile.write_text(head + table + "\n", encoding="utf-8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=models.FAMILIES)
    parser.add_argument("--size", default="d128", choices=sorted(models.SIZES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--phase-steps",
        type=int,
        default=3,
        help="steps after the timed ones that wait for the device after each phase",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--stack", choices=("eager", "reference"), default="eager")
    parser.add_argument("--step", choices=("lean", "reference"), help="step protocol (see above)")
    parser.add_argument("--profile", type=Path, help="torch.profiler's table of the timed steps here")
    parser.add_argument("--profile-rows", type=int, default=40, help="operators in that table")
    args = parser.parse_args()
    if min(args.batch, args.seq, args.steps) < 1 or min(args.warmup, args.phase_steps) < 0:
        sys.exit(
            "--batch, --seq and --steps must be positive, --warmup and --phase-steps not negative"
        )
    step_protocol = args.step or ("reference" if args.stack == "reference" else "lean")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = build_model(args).to(device)
    model.train()
    batch = synthetic_batch(args.batch, args.seq, device)
    precision, autocast = reference_precision(args, device)
    # The train stage's optimiser: AdamW (beta2 0.95, weight decay 0.01) after clipping at 1.0.
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01, eps=1e-8)
    step = reference_step if step_protocol == "reference" else lean_step
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    profiler = Profiler(args, device) if args.profile else None
    times = []
    for index in range(args.warmup + args.steps):
        if profiler and index == args.warmup:
            profiler.start()
        start = time.perf_counter()
        loss = step(model, optim, batch, autocast)
        seconds = time.perf_counter() - start
        if not math.isfinite(loss):
            sys.exit(f"the loss, gradient norm or a parameter is not finite at step {index}")
        if index >= args.warmup:
            times.append(seconds)
    if profiler:
        profiler.write(args)
    last_loss, phase_s, phases = loss, [], Phases(device, model)
    for index in range(args.warmup + args.steps, args.warmup + args.steps + args.phase_steps):
        loss, figures = phases.step(step, model, optim, batch, autocast)
        if figures is None or not math.isfinite(loss):
            sys.exit(f"the loss, gradient norm or a parameter is not finite at step {index}")
        phase_s.append(figures)
    median = statistics.median(times)
    on_gpu = device.type == "cuda"
    print(
        json.dumps(
            {
                "arch": args.arch,
                "size": args.size,
                "device": args.device,
                "batch": args.batch,
                "seq": args.seq,
                "stack": args.stack,
                "step": step_protocol,
                # What the reference stack ran in place of its usual kernels, if anything.
                "stack_note": getattr(model, "stack_note", None),
                "precision": precision,
                "tokens_per_s": args.batch * args.seq / median,
                "median_step_s": median,
                "step_s": times,
                "last_loss": last_loss,
                "phase_s": phase_s,
                "steps": args.steps,
                "profiled": bool(profiler),
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if on_gpu else None,
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(device) if on_gpu else None,
            }
        )
    )


if __name__ == "__main__":
    main()
