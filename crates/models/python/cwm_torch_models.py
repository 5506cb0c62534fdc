"""PyTorch versions of cwm's model families, written from the reference specification
(../../../../shared/docs/reference-spec.md, sections A.3 and B), with the reference's
``state_dict`` key names and shapes.

They exist to check cwm against an independent implementation: a safetensors file written by
``cwm model export`` loads here with ``load_state_dict(strict=True)``, and both sides must give
the same logits (``crates/models/tests/suite/torch_parity.rs``). They also serve as the PyTorch
baseline of ``benches/train_throughput.rs``.

Families: ``transformer``, ``slice``, ``slice_diag``, ``gdn``, ``gdn_pos``, ``mamba2``,
``mamba3`` (SISO, and MIMO with ``mimo=True`` following cwm's reading of the spec's uncertain
points: B/C rank-major, rotary pairs ``(i, i + 32)``). The recurrences are plain step-by-step
loops, except SLiCE, which also has the reference's parallel form (an inclusive associative
scan inside chunks of 256 steps, the default) because the throughput bench uses it.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 20482
START = 20480
PAD = 20481
HEAD_OUT = 1878

# name -> (d_model, layers, heads), spec B.0
SIZES = {
    "d128": (128, 1, 2),
    "d256": (256, 2, 4),
    "d384": (384, 4, 6),
    "d512": (512, 6, 8),
}

FAMILIES = ("transformer", "slice", "slice_diag", "gdn", "gdn_pos", "mamba3", "mamba2")

# (first logit, labels, classes) of each label group, spec A.3
LABEL_GROUPS = (
    (0, 64, 13),
    (832, 1, 2),
    (834, 4, 2),
    (842, 1, 9),
    (851, 1, 3),
    (854, 2, 256),
    (1366, 2, 256),
)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension."""

    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def state_loss(logits, targets, valid):
    """Spec A.4: cross-entropy summed over valid steps and all 75 labels, divided by
    ``max(1, 75 * valid steps)``. ``logits [B,T,1878]``, ``targets [B,T,75]`` (int64),
    ``valid [B,T]`` (bool)."""
    batch, seq, _ = logits.shape
    total = logits.new_zeros(batch, seq)
    label = 0
    for offset, n_labels, classes in LABEL_GROUPS:
        view = logits[..., offset : offset + n_labels * classes].reshape(batch, seq, n_labels, classes)
        log_probs = F.log_softmax(view, dim=-1)
        index = targets[..., label : label + n_labels].unsqueeze(-1)
        total = total - log_probs.gather(-1, index).squeeze(-1).sum(-1)
        label += n_labels
    mask = valid.to(logits.dtype)
    return (total * mask).sum() / torch.clamp(mask.sum() * 75.0, min=1.0)


# ---------------------------------------------------------------------------------------------
# Transformer (spec B.1)


def reference_rope_tables(seq, head_dim, device):
    """The reference's tables: coordinate i at step t turns by ``t * f_(i mod head_dim/2)``."""
    half = head_dim // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float32, device=device) * 2 / head_dim))
    angles = torch.arange(seq, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # [seq, head_dim]
    return angles.cos(), angles.sin()


def apply_reference_rope(x, cos, sin):
    """``out[2j] = x[2j] cos - x[2j+1] sin``, ``out[2j+1] = x[2j+1] cos + x[2j] sin``."""
    even = x[..., 0::2]
    odd = x[..., 1::2]
    partner = torch.stack([-odd, even], dim=-1).flatten(-2)
    return x * cos + partner * sin


class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x, cos, sin):
        batch, seq, d = x.shape
        head_dim = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        shape = (batch, seq, self.heads, head_dim)
        q = apply_reference_rope(q.reshape(shape).transpose(1, 2), cos, sin)
        k = apply_reference_rope(k.reshape(shape).transpose(1, 2), cos, sin)
        v = v.reshape(shape).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.out_proj(out.transpose(1, 2).reshape(batch, seq, d))


class SwiGLU(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.in_proj = nn.Linear(d, 8 * d)
        self.out_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        gate, value = self.in_proj(x).chunk(2, dim=-1)
        return self.out_proj(F.silu(gate) * value)


class TransformerBlock(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.norm1 = RMSNorm(d, 1e-6)
        self.attn = Attention(d, heads, dropout)
        self.norm2 = RMSNorm(d, 1e-6)
        self.mlp = SwiGLU(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn(self.norm1(x), cos, sin))
        return x + self.drop(self.mlp(self.norm2(x)))


class Transformer(nn.Module):
    def __init__(self, d, layers, heads, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(TransformerBlock(d, heads, dropout) for _ in range(layers))
        self.final_norm = RMSNorm(d, 1e-6)
        self.output_head = nn.Linear(d, HEAD_OUT)
        self.drop = nn.Dropout(dropout)
        self.head_dim = d // heads

    def forward(self, moves):
        x = self.drop(self.tok_emb(moves))
        cos, sin = reference_rope_tables(moves.shape[1], self.head_dim, moves.device)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.output_head(self.final_norm(x))


# ---------------------------------------------------------------------------------------------
# SLiCE (spec B.2)


class SliceCell(nn.Module):
    """``y_t = (I + A_t) y_(t-1) + c_t`` with block-diagonal (b > 1) or diagonal (b = 1) A."""

    def __init__(self, d, block, init_std=0.1, scale=0.1, chunk=256, parallel=True):
        super().__init__()
        self.d, self.block, self.scale, self.chunk, self.parallel = d, block, scale, chunk, parallel
        self.init = nn.Parameter(torch.randn(d) * init_std)
        self.vf_A = nn.Linear(d + 1, d * block, bias=False)
        self.vf_B = nn.Linear(d + 1, d, bias=False)
        nn.init.normal_(self.vf_A.weight, std=init_std / math.sqrt(block))
        nn.init.normal_(self.vf_B.weight, std=init_std)

    def forward(self, x):
        batch, seq, d = x.shape
        previous = F.pad(x, (0, 0, 1, 0))[:, :seq]
        u = torch.cat([x.new_ones(batch, seq, 1), x - previous], dim=-1) * self.scale
        a = self.vf_A(u)
        c = self.vf_B(u)
        y0 = self.init.expand(batch, d)
        b = self.block
        if b == 1:
            m = a + 1.0
        else:
            eye = torch.eye(b, dtype=x.dtype, device=x.device)
            m = a.reshape(batch, seq, d // b, b, b) + eye
        if self.parallel:
            return self._parallel(m, c, y0)
        return self._sequential(m, c, y0)

    def _step(self, m, y):
        if self.block == 1:
            return m * y
        batch = y.shape[0]
        return (m @ y.reshape(batch, -1, self.block, 1)).reshape(batch, -1)

    def _sequential(self, m, c, y0):
        y, outputs = y0, []
        for t in range(c.shape[1]):
            y = self._step(m[:, t], y) + c[:, t]
            outputs.append(y)
        return torch.stack(outputs, dim=1)

    def _parallel(self, m, c, y0):
        """Chunks of ``self.chunk`` steps; inside a chunk an inclusive Hillis-Steele scan of the
        affine maps, ``(M_r, c_r) after (M_l, c_l) = (M_r M_l, M_r c_l + c_r)``."""
        batch, seq, d = c.shape
        b = self.block
        outputs, y = [], y0
        for start in range(0, seq, self.chunk):
            pm = m[:, start : start + self.chunk]
            pc = c[:, start : start + self.chunk]
            n = pc.shape[1]
            if b > 1:
                pc = pc.reshape(batch, n, d // b, b, 1)
            offset = 1
            while offset < n:
                m_right, m_left = pm[:, offset:], pm[:, : n - offset]
                c_right, c_left = pc[:, offset:], pc[:, : n - offset]
                if b == 1:
                    new_c = m_right * c_left + c_right
                    new_m = m_right * m_left
                else:
                    new_c = m_right @ c_left + c_right
                    new_m = m_right @ m_left
                pm = torch.cat([pm[:, :offset], new_m], dim=1)
                pc = torch.cat([pc[:, :offset], new_c], dim=1)
                offset *= 2
            if b == 1:
                out = pm * y[:, None] + pc
            else:
                out = (pm @ y.reshape(batch, 1, d // b, b, 1) + pc).reshape(batch, n, d)
            outputs.append(out)
            y = out[:, -1]
        return torch.cat(outputs, dim=1)


class SliceLayer(nn.Module):
    def __init__(self, d, block, dropout, parallel):
        super().__init__()
        self.slice = SliceCell(d, block, parallel=parallel)
        self.norm1 = RMSNorm(d, 1e-6)
        self.norm2 = RMSNorm(d, 1e-6)
        self.token_mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.slice(self.norm1(x)))
        return x + self.drop(self.token_mlp(self.norm2(x)))


class Slice(nn.Module):
    def __init__(self, d, layers, block, dropout=0.1, parallel=True):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList(SliceLayer(d, block, dropout, parallel) for _ in range(layers))
        self.output_head = nn.Linear(d, HEAD_OUT)
        self.drop = nn.Dropout(dropout)

    def forward(self, moves):
        x = self.drop(self.embedding(moves))
        for layer in self.layers:
            x = layer(x)
        return self.output_head(x)


# ---------------------------------------------------------------------------------------------
# Gated DeltaNet (spec B.3)


def causal_depthwise_conv(conv, x):
    """A depthwise ``nn.Conv1d`` with padding K-1 applied causally to ``x [B, T, C]``."""
    seq = x.shape[1]
    return conv(x.transpose(1, 2))[..., :seq].transpose(1, 2)


class GatedDeltaNetLayer(nn.Module):
    def __init__(self, d, heads, allow_neg_eigval):
        super().__init__()
        self.heads, self.allow_neg_eigval = heads, allow_neg_eigval
        key_dim, value_dim = 48 * heads, 96 * heads
        self.q_proj = nn.Linear(d, key_dim, bias=False)
        self.k_proj = nn.Linear(d, key_dim, bias=False)
        self.v_proj = nn.Linear(d, value_dim, bias=False)
        self.a_proj = nn.Linear(d, heads, bias=False)
        self.b_proj = nn.Linear(d, heads, bias=False)
        self.g_proj = nn.Linear(d, value_dim, bias=False)
        self.o_proj = nn.Linear(value_dim, d, bias=False)
        conv = lambda c: nn.Conv1d(c, c, 4, groups=c, padding=3, bias=False)  # noqa: E731
        self.q_conv1d = conv(key_dim)
        self.k_conv1d = conv(key_dim)
        self.v_conv1d = conv(value_dim)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1e-3, 16)))
        self.dt_bias = nn.Parameter(torch.zeros(heads))
        self.o_norm = RMSNorm(96, 1e-6)

    def forward(self, x):
        batch, seq, _ = x.shape
        h = self.heads
        q = F.silu(causal_depthwise_conv(self.q_conv1d, self.q_proj(x))).reshape(batch, seq, h, 48)
        k = F.silu(causal_depthwise_conv(self.k_conv1d, self.k_proj(x))).reshape(batch, seq, h, 48)
        v = F.silu(causal_depthwise_conv(self.v_conv1d, self.v_proj(x))).reshape(batch, seq, h, 96)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(48)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(self.b_proj(x))
        if self.allow_neg_eigval:
            beta = beta * 2.0
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)
        alpha = g.exp()
        state = x.new_zeros(batch, h, 48, 96)
        outputs = []
        for t in range(seq):
            state = state * alpha[:, t, :, None, None]
            k_t = k[:, t]  # [B, h, 48]
            predicted = torch.einsum("bhk,bhkv->bhv", k_t, state)
            correction = (v[:, t] - predicted) * beta[:, t, :, None]
            state = state + k_t[..., None] * correction[:, :, None, :]
            outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
        o = torch.stack(outputs, dim=1)  # [B, T, h, 96]
        gate = self.g_proj(x).reshape(batch, seq, h, 96)
        o = self.o_norm(o) * F.silu(gate)
        return self.o_proj(o.reshape(batch, seq, h * 96))


class GdnMlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        inner = 256 * math.ceil((8 * d // 3) / 256)
        self.gate_proj = nn.Linear(d, inner, bias=False)
        self.up_proj = nn.Linear(d, inner, bias=False)
        self.down_proj = nn.Linear(inner, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GdnBlock(nn.Module):
    def __init__(self, d, heads, allow_neg_eigval):
        super().__init__()
        self.attn_norm = RMSNorm(d, 1e-6)
        self.attn = GatedDeltaNetLayer(d, heads, allow_neg_eigval)
        self.mlp_norm = RMSNorm(d, 1e-6)
        self.mlp = GdnMlp(d)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GdnBackbone(nn.Module):
    def __init__(self, d, layers, heads, allow_neg_eigval):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.layers = nn.ModuleList(GdnBlock(d, heads, allow_neg_eigval) for _ in range(layers))
        self.norm = RMSNorm(d, 1e-6)


class GatedDeltaNet(nn.Module):
    def __init__(self, d, layers, heads, allow_neg_eigval):
        super().__init__()
        self.backbone = GdnBackbone(d, layers, heads, allow_neg_eigval)
        self.output_head = nn.Linear(d, HEAD_OUT)

    def forward(self, moves):
        x = self.backbone.embeddings(moves)
        for layer in self.backbone.layers:
            x = layer(x)
        return self.output_head(self.backbone.norm(x))


# ---------------------------------------------------------------------------------------------
# Mamba-2 and Mamba-3 (spec B.4)

D_STATE, HEAD_DIM, N_ANGLES = 128, 64, 32


class GatedMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 8 * d, bias=False)
        self.fc2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * F.silu(gate))


class Mamba2Mixer(nn.Module):
    def __init__(self, d):
        super().__init__()
        d_inner = 2 * d
        self.heads = d_inner // HEAD_DIM
        channels = d_inner + 2 * D_STATE
        self.in_proj = nn.Linear(d, 2 * d_inner + 2 * D_STATE + self.heads, bias=False)
        self.conv1d = nn.Conv1d(channels, channels, 4, groups=channels, padding=3, bias=True)
        self.dt_bias = nn.Parameter(torch.zeros(self.heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm = RMSNorm(d_inner, 1e-5)
        self.out_proj = nn.Linear(d_inner, d, bias=False)

    def forward(self, x):
        batch, seq, _ = x.shape
        h, p, n = self.heads, HEAD_DIM, D_STATE
        d_inner = h * p
        z, xbc, dt = self.in_proj(x).split([d_inner, d_inner + 2 * n, h], dim=-1)
        xbc = F.silu(causal_depthwise_conv(self.conv1d, xbc))
        xs, b, c = xbc.split([d_inner, n, n], dim=-1)
        xs = xs.reshape(batch, seq, h, p)
        dt = F.softplus(dt + self.dt_bias)  # [B, T, h]
        decay = torch.exp(dt * -self.A_log.exp())
        state = x.new_zeros(batch, h, p, n)
        outputs = []
        for t in range(seq):
            update = (dt[:, t, :, None] * xs[:, t])[..., None] * b[:, t, None, None, :]
            state = state * decay[:, t, :, None, None] + update
            outputs.append(torch.einsum("bhpn,bn->bhp", state, c[:, t]))
        y = torch.stack(outputs, dim=1) + xs * self.D[:, None]
        y = self.norm(y.reshape(batch, seq, d_inner) * F.silu(z))
        return self.out_proj(y)


def rotate_pairs(x, theta, halves):
    """Rotates the first ``2 * n_angles`` coordinates of ``x [..., N]`` by ``theta [..., n_angles]``:
    adjacent pairs ``(2i, 2i+1)``, or ``(i, i + n_angles)`` when ``halves``."""
    s = theta.shape[-1]
    rotated, rest = x[..., : 2 * s], x[..., 2 * s :]
    cos, sin = theta.cos(), theta.sin()
    if halves:
        a, b = rotated[..., :s], rotated[..., s:]
        rotated = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = rotated[..., 0::2], rotated[..., 1::2]
        rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([rotated, rest], dim=-1)


class Mamba3Mixer(nn.Module):
    def __init__(self, d, mimo=False, rank=4):
        super().__init__()
        d_inner = 2 * d
        self.heads = d_inner // HEAD_DIM
        self.rank = rank if mimo else 1
        self.mimo = mimo
        h, r = self.heads, self.rank
        self.in_proj = nn.Linear(d, 2 * d_inner + 2 * D_STATE * r + 3 * h + N_ANGLES, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(h))
        self.B_bias = nn.Parameter(torch.ones(h, r, D_STATE))
        self.C_bias = nn.Parameter(torch.ones(h, r, D_STATE))
        self.B_norm = RMSNorm(D_STATE, 1e-5)
        self.C_norm = RMSNorm(D_STATE, 1e-5)
        self.D = nn.Parameter(torch.ones(h))
        self.out_proj = nn.Linear(d_inner, d, bias=False)
        if mimo:
            self.mimo_x = nn.Parameter(torch.full((h, r, HEAD_DIM), 1.0 / r))
            self.mimo_z = nn.Parameter(torch.ones(h, r, HEAD_DIM))
            self.mimo_o = nn.Parameter(torch.full((h, r, HEAD_DIM), 1.0 / r))

    def forward(self, x):
        batch, seq, _ = x.shape
        h, p, n, r = self.heads, HEAD_DIM, D_STATE, self.rank
        d_inner = h * p
        z, xs, b, c, dd_dt, dd_a, trap, angle = self.in_proj(x).split(
            [d_inner, d_inner, n * r, n * r, h, h, h, N_ANGLES], dim=-1
        )
        dt = F.softplus(dd_dt + self.dt_bias)  # [B, T, h]
        a = torch.clamp(-F.softplus(dd_a), max=-1e-4)
        alpha = torch.exp(a * dt)
        lam = torch.sigmoid(trap)
        theta = torch.cumsum(math.pi * torch.tanh(angle)[:, :, None, :] * dt[..., None], dim=1)
        q = self.C_norm(c.reshape(batch, seq, 1, r, n)) + self.C_bias
        k = self.B_norm(b.reshape(batch, seq, 1, r, n)) + self.B_bias
        q = rotate_pairs(q, theta[:, :, :, None, :], self.mimo)  # [B, T, h, r, N]
        k = rotate_pairs(k, theta[:, :, :, None, :], self.mimo)
        xs = xs.reshape(batch, seq, h, 1, p)
        v = xs * self.mimo_x if self.mimo else xs  # [B, T, h, r, P]
        state = x.new_zeros(batch, h, p, n)
        previous = x.new_zeros(batch, h, p, n)  # sum_r v_(t-1,r) k_(t-1,r)^T
        outputs = []
        for t in range(seq):
            current = torch.einsum("bhrp,bhrn->bhpn", v[:, t], k[:, t])
            w_prev = ((1 - lam[:, t]) * dt[:, t] * alpha[:, t])[:, :, None, None]
            w_cur = (lam[:, t] * dt[:, t])[:, :, None, None]
            state = alpha[:, t, :, None, None] * state + w_prev * previous + w_cur * current
            previous = current
            outputs.append(torch.einsum("bhpn,bhrn->bhrp", state, q[:, t]))
        y = torch.stack(outputs, dim=1) + v * self.D[:, None, None]  # [B, T, h, r, P]
        z = z.reshape(batch, seq, h, 1, p)
        if self.mimo:
            y = (y * F.silu(z * self.mimo_z) * self.mimo_o).sum(dim=3)
        else:
            y = (y * F.silu(z)).reshape(batch, seq, h, p)
        return self.out_proj(y.reshape(batch, seq, d_inner))


class MambaBlock(nn.Module):
    def __init__(self, d, family, mimo):
        super().__init__()
        self.norm = RMSNorm(d, 1e-5)
        self.mixer = Mamba2Mixer(d) if family == "mamba2" else Mamba3Mixer(d, mimo=mimo)
        self.norm2 = RMSNorm(d, 1e-5)
        self.mlp = GatedMLP(d)

    def forward(self, x):
        x = x + self.mixer(self.norm(x))
        return x + self.mlp(self.norm2(x))


class Mamba(nn.Module):
    def __init__(self, d, layers, family, dropout=0.1, mimo=False):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList(MambaBlock(d, family, mimo) for _ in range(layers))
        self.final_norm = RMSNorm(d, 1e-5)
        self.output_head = nn.Linear(d, HEAD_OUT)
        self.drop = nn.Dropout(dropout)

    def forward(self, moves):
        x = self.drop(self.embedding(moves))
        for layer in self.layers:
            x = layer(x)
        return self.output_head(self.final_norm(x))


def dimensions(arch, size):
    """``(d_model, layers, heads)`` of ``size``, after checking both names."""
    if arch not in FAMILIES:
        raise ValueError(f"unknown family {arch!r} (expected one of {', '.join(FAMILIES)})")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r} (expected one of {', '.join(SIZES)})")
    return SIZES[size]


def build(arch, size, mimo=False, dropout=0.1, slice_parallel=True):
    """The model of family ``arch`` at ``size`` (e.g. ``"slice", "d128"``)."""
    d, layers, heads = dimensions(arch, size)
    if arch == "transformer":
        return Transformer(d, layers, heads, dropout)
    if arch in ("slice", "slice_diag"):
        return Slice(d, layers, 8 if arch == "slice" else 1, dropout, slice_parallel)
    if arch in ("gdn", "gdn_pos"):
        return GatedDeltaNet(d, layers, heads, allow_neg_eigval=arch == "gdn")
    return Mamba(d, layers, arch, dropout, mimo=mimo)
