"""Loads a safetensors file written by ``cwm model export`` into the PyTorch model of the same
family and writes its logits for given move sequences. The model is cwm's own PyTorch version
(``cwm_torch_models.py``), or with ``--stack reference`` the one built from the libraries the
reference imports (``reference_stack.py``).

    python3 torch_logits.py --arch slice --size d128 --weights model.safetensors \
        --moves moves.json --out logits.f32 [--mimo] [--slice-sequential] [--stack reference]

``moves.json`` is a JSON list of equal-length lists of move ids (already padded with 20481).
The output is the logits ``[batch, seq, 1878]`` as raw little-endian f32, row-major.

Before loading, the file's keys and shapes are compared with the model's ``state_dict()``;
any difference is printed (one line per key) and the exit status is 3. Loading then uses
``load_state_dict(strict=True)``. The model runs in eval mode (no dropout), in float32.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cwm_torch_models  # noqa: E402
import reference_stack  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=cwm_torch_models.FAMILIES)
    parser.add_argument("--size", required=True, choices=sorted(cwm_torch_models.SIZES))
    parser.add_argument("--mimo", action="store_true", help="Mamba-3 MIMO (rank 4)")
    parser.add_argument("--slice-sequential", action="store_true", help="SLiCE: plain loop")
    parser.add_argument("--weights", required=True, type=Path)
    parser.add_argument("--moves", type=Path, help="JSON list of move-id lists")
    parser.add_argument("--out", type=Path, help="raw f32 logits")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stack", choices=("eager", "reference"), default="eager")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.stack == "reference":
        if args.mimo or args.slice_sequential:
            sys.exit("--mimo and --slice-sequential apply to the eager stack only")
        model = reference_stack.build(args.arch, args.size)
    else:
        model = cwm_torch_models.build(
            args.arch, args.size, mimo=args.mimo, slice_parallel=not args.slice_sequential
        )
    state = load_file(str(args.weights))
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    found = {key: tuple(value.shape) for key, value in state.items()}
    problems = []
    for key in sorted(expected.keys() - found.keys()):
        problems.append(f"missing {key} {list(expected[key])}")
    for key in sorted(found.keys() - expected.keys()):
        problems.append(f"unexpected {key} {list(found[key])}")
    for key in sorted(expected.keys() & found.keys()):
        if expected[key] != found[key]:
            problems.append(f"shape {key}: file {list(found[key])}, model {list(expected[key])}")
    for key, value in state.items():
        if value.dtype != torch.float32:
            problems.append(f"dtype {key}: {value.dtype}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(3)
    model.load_state_dict(state, strict=True)
    model.eval()
    print(f"keys ok: {len(expected)} tensors", file=sys.stderr)

    if args.moves is None:
        return
    moves = torch.tensor(json.loads(args.moves.read_text()), dtype=torch.int64)
    with torch.no_grad():
        logits = model(moves).to(torch.float32).contiguous()
    data = logits.numpy().astype("<f4", copy=False)
    if args.out is None:
        print(json.dumps({"shape": list(data.shape), "sum": float(np.float64(data.sum()))}))
    else:
        args.out.write_bytes(data.tobytes())


if __name__ == "__main__":
    main()
