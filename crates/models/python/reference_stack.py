"""The reference's stack: cwm's model families built from the libraries the reference imports,
for timing cwm against what the paper's runs actually executed (docs/gpu.md).

* ``transformer``: PyTorch with its fused attention (``scaled_dot_product_attention``, with the
  attention-probability dropout inside it), which is what the reference's transformer calls;
  the module is ``cwm_torch_models.Transformer``.
* ``slice``, ``slice_diag``: ``slices.SLiCELayer`` from torch-slices 0.3.3 (pure PyTorch: a
  parallel associative scan in chunks of 256 steps), configured as the reference's presets.
* ``gdn``, ``gdn_pos``: ``GatedDeltaNetModel`` from flash-linear-attention 0.5.0 (Triton
  kernels; CUDA only), configured as the reference does, with the padding mask it passes. On a
  Hopper GPU (H100, H200) with Triton 3.4 or later, FLA 0.5.0 refuses its gated backward
  kernel in Triton (it reports wrong results there, fla#640) and wants TileLang for it: see
  ``fla_hopper_route``.
* ``mamba2``, ``mamba3``: ``Mamba2`` and ``Mamba3`` (SISO) mixers inside ``Block`` and
  ``GatedMLP`` from mamba_ssm at the revision the reference pins (Triton kernels; CUDA only;
  Mamba-2's fused path also needs the ``causal_conv1d`` CUDA extension). The reference's
  re-initialisation (spec B.4) is applied.

The models have the reference's ``state_dict`` keys and shapes, so a safetensors file written
by ``cwm model export`` loads into them with ``strict=True`` (``torch_logits.py --stack
reference``). A library that is missing raises ``MissingLibrary`` naming the package to
install; ``benches/python/reference_stack.sh`` fetches them for a machine without network.

mamba_ssm's package imports, at import time, kernels that training a SISO model never calls:
Mamba-1's CUDA scan (``selective_scan_cuda``), Mamba-3's MIMO kernel (TileLang) and its
decoding step (CuTe DSL). Where those are not installed, ``import_mamba_ssm`` puts in their
place modules whose functions raise when called, and says so on stderr, so that a machine with
only PyTorch, Triton and nvcc can time the SISO and Mamba-2 training steps.
"""

import importlib
import importlib.util
import math
import os
import sys
import types
from functools import partial

import torch
from torch import nn

import cwm_torch_models as eager
from cwm_torch_models import HEAD_OUT, PAD, VOCAB, RMSNorm

# The kernels mamba_ssm imports eagerly and SISO/Mamba-2 training never calls:
# (module, its function or None for a whole extension, the package behind it, what it is)
MAMBA_UNUSED_KERNELS = (
    ("selective_scan_cuda", None, "selective_scan_cuda", "Mamba-1's CUDA selective scan"),
    (
        "mamba_ssm.ops.tilelang.mamba3.mamba3_mimo",
        "mamba3_mimo",
        "tilelang",
        "Mamba-3's MIMO kernel (TileLang)",
    ),
    (
        "mamba_ssm.ops.cute.mamba3.mamba3_step_fn",
        "mamba3_step_fn",
        "cutlass",
        "Mamba-3's decoding step (CuTe DSL)",
    ),
)


class MissingLibrary(ImportError):
    """A library of the reference's stack is not installed."""


def _import(module, package):
    try:
        return importlib.import_module(module)
    except Exception as error:  # a version mismatch fails as ValueError or RuntimeError too
        raise MissingLibrary(
            f"the reference stack needs {package} ({module} failed to import: {error}); "
            "benches/python/reference_stack.sh fetches it"
        ) from error


def _placeholder(name, what):
    def unavailable(*_args, **_kwargs):
        raise RuntimeError(f"{what} ({name}) is not installed; SISO and Mamba-2 training never call it")

    return unavailable


def _placeholder_attribute(module, what, name):
    # A module's own attributes (``__file__``, ``__path__``, ...) stay missing: ``inspect`` reads
    # ``__file__`` of every module in ``sys.modules`` (PyTorch's ``custom_op`` registration,
    # which mamba_ssm's import makes, goes through it), and a function there breaks it.
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return _placeholder(f"{module}.{name}", what)


def _module_importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_mamba_ssm():
    """Imports mamba_ssm, standing in for the kernels training never calls where they are not
    installed (see the module's doc)."""
    stand_in_unused_kernels()
    return _import("mamba_ssm", "mamba_ssm at revision b267be48 (github.com/state-spaces/mamba)")


def stand_in_unused_kernels():
    """Puts a placeholder module in ``sys.modules`` for each of ``MAMBA_UNUSED_KERNELS`` that
    is neither imported nor installed, saying so on stderr."""
    for module, function, package, what in MAMBA_UNUSED_KERNELS:
        if module in sys.modules or _module_importable(package):
            continue
        stub = types.ModuleType(module)
        if function is None:
            stub.__getattr__ = partial(_placeholder_attribute, module, what)
        else:
            setattr(stub, function, _placeholder(module, what))
        sys.modules[module] = stub
        print(
            f"reference stack: {what} is not installed; a placeholder stands in for {module}", file=sys.stderr
        )


# ---------------------------------------------------------------------------------------------
# SLiCE (spec B.2) from torch-slices


class SliceRef(eager.Slice):
    """cwm's PyTorch SLiCE model (embedding, dropout, head) with torch-slices' layers."""

    def __init__(self, d, layers, block, dropout):
        super().__init__(d, 0, block, dropout)
        slices = _import("slices", "torch-slices==0.3.3")
        self.layers = nn.ModuleList(
            slices.SLiCELayer(
                input_dim=d,
                block_size=block,
                init_std=0.1,
                scale=0.1,
                use_parallel=True,
                chunk_size=256,
                dropout_rate=dropout,
                path_mode="values",
                norm_type="rmsnorm",
                prenorm=True,
                second_norm=True,
                ff_style="mlp",
                ff_activation="gelu",
                ff_mult=4,
                dropout_position="residual",
                norm_eps=1e-6,
            )
            for _ in range(layers)
        )


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet (spec B.3) from flash-linear-attention

FLA_PACKAGE = "flash-linear-attention==0.5.0 and fla-core==0.5.0 with Triton 3.6"

# How Gated DeltaNet's backward pass runs where FLA refuses its Triton kernel (below).
FLA_HOPPER_ENV = "CWM_REFERENCE_FLA_HOPPER"


def fla_hopper_route(chunk_o, tilelang_installed, choice):
    """Which kernel computes Gated DeltaNet's gated ``chunk_bwd_dqkwg`` on this machine, as a
    note for the figures (``None`` where FLA runs as everywhere else).

    FLA 0.5.0 (``fla.ops.common.chunk_o``, passed in as ``chunk_o``) raises in that function on
    a Hopper GPU under Triton 3.4 or later, whose Triton kernel it reports as giving wrong
    results there (fla#640), unless TileLang is installed, which it then dispatches to. TileLang
    and its dependencies are some 79 MiB of wheels. With ``choice`` (``CWM_REFERENCE_FLA_HOPPER``)
    ``triton`` the guard is lifted and FLA's Triton kernel runs: the kernel the reference runs on
    other GPUs, timed here, its gradients unchecked on Hopper. Otherwise the refusal is raised
    here, before any step, naming both ways."""
    if not (chunk_o.IS_NVIDIA_HOPPER and chunk_o.TRITON_ABOVE_3_4_0):
        return None
    if tilelang_installed:
        return "FLA's gated backward by TileLang (Hopper)"
    if choice == "triton":
        # The flag is read only by that guard at call time; the kernels' tuning configurations
        # were chosen at import and stay Hopper's.
        chunk_o.IS_NVIDIA_HOPPER = False
        note = "FLA's Triton gated backward on Hopper, gradients unchecked (fla#640)"
        print(f"reference_stack: {note}", file=sys.stderr)
        return note
    raise MissingLibrary(
        "flash-linear-attention 0.5.0 refuses Gated DeltaNet's gated backward kernel in Triton on a "
        "Hopper GPU under Triton >= 3.4 (fla#640) and needs tilelang installed; or set "
        f"{FLA_HOPPER_ENV}=triton to time FLA's Triton kernel there, its gradients unchecked"
    )


class GatedDeltaNetRef(nn.Module):
    def __init__(self, d, layers, heads, allow_neg_eigval):
        super().__init__()
        fla = _import("fla.models.gated_deltanet", FLA_PACKAGE)
        self.stack_note = fla_hopper_route(
            _import("fla.ops.common.chunk_o", FLA_PACKAGE),
            _module_importable("tilelang"),
            os.environ.get(FLA_HOPPER_ENV),
        )
        config = fla.GatedDeltaNetConfig(
            attn_mode="chunk",
            hidden_size=d,
            expand_v=2.0,
            use_gate=True,
            use_short_conv=True,
            allow_neg_eigval=allow_neg_eigval,
            conv_size=4,
            head_dim=48,
            num_heads=heads,
            num_v_heads=heads,
            hidden_ratio=4,
            num_hidden_layers=layers,
            norm_eps=1e-6,
            use_cache=False,
            vocab_size=VOCAB,
            pad_token_id=PAD,
        )
        self.backbone = fla.GatedDeltaNetModel(config)
        self.output_head = nn.Linear(d, HEAD_OUT)
        nn.init.normal_(self.output_head.weight, std=0.02)
        nn.init.zeros_(self.output_head.bias)

    def forward(self, moves):
        mask = moves.ne(PAD).long()
        out = self.backbone(input_ids=moves, attention_mask=mask, use_cache=False)
        return self.output_head(out.last_hidden_state)


# ---------------------------------------------------------------------------------------------
# Mamba-2 and Mamba-3 (spec B.4) from mamba_ssm


def reinit_mamba(model, layers):
    """Spec B.4's model-level re-initialisation: Linear biases 0, embeddings N(0, 0.02²), and
    each ``out_proj.weight`` / ``fc2.weight`` redrawn from U(±1/√fan_in) divided by √(2L)."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        for child_name, child in module.named_children():
            if child_name in ("out_proj", "fc2") and isinstance(child, nn.Linear):
                bound = 1.0 / math.sqrt(child.weight.shape[1])
                with torch.no_grad():
                    child.weight.uniform_(-bound, bound)
                    child.weight /= math.sqrt(2 * layers)


class MambaRef(nn.Module):
    def __init__(self, d, layers, family, dropout):
        super().__init__()
        import_mamba_ssm()
        block = _import("mamba_ssm.modules.block", "mamba_ssm")
        mlp = _import("mamba_ssm.modules.mlp", "mamba_ssm")
        if family == "mamba2":
            mixer_module = _import("mamba_ssm.modules.mamba2", "mamba_ssm")
            mixer = partial(
                mixer_module.Mamba2,
                d_state=eager.D_STATE,
                d_conv=4,
                expand=2,
                headdim=eager.HEAD_DIM,
                ngroups=1,
                chunk_size=256,
                use_mem_eff_path=True,
            )
        else:
            mixer_module = _import("mamba_ssm.modules.mamba3", "mamba_ssm at revision b267be48")
            mixer = partial(
                mixer_module.Mamba3,
                d_state=eager.D_STATE,
                expand=2,
                headdim=eager.HEAD_DIM,
                ngroups=1,
                rope_fraction=0.5,
                is_outproj_norm=False,
                is_mimo=False,
                chunk_size=64,
                dropout=dropout,
            )
        self.embedding = nn.Embedding(VOCAB, d)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            block.Block(
                d,
                partial(mixer, layer_idx=i),
                partial(mlp.GatedMLP, hidden_features=4 * d, out_features=d),
                norm_cls=partial(RMSNorm, eps=1e-5),
                fused_add_norm=False,
                residual_in_fp32=True,
            )
            for i in range(layers)
        )
        self.final_norm = RMSNorm(d, 1e-5)
        self.output_head = nn.Linear(d, HEAD_OUT)
        reinit_mamba(self, layers)

    def forward(self, moves):
        hidden, residual = self.drop(self.embedding(moves)), None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        residual = hidden if residual is None else hidden + residual
        return self.output_head(self.final_norm(residual.to(self.final_norm.weight.dtype)))


def build(arch, size, dropout=0.1):
    """The reference stack's model of family ``arch`` at ``size``."""
    d, layers, heads = eager.dimensions(arch, size)
    if arch == "transformer":
        return eager.Transformer(d, layers, heads, dropout)
    if arch in ("slice", "slice_diag"):
        return SliceRef(d, layers, 8 if arch == "slice" else 1, dropout)
    if arch in ("gdn", "gdn_pos"):
        return GatedDeltaNetRef(d, layers, heads, allow_neg_eigval=arch == "gdn")
    return MambaRef(d, layers, arch, dropout)
