"""The ``planted`` model family: a torch module whose geometry and loss are known by construction.

A :class:`PlantedForCausalLM` is a real ``transformers`` model (config class :class:`PlantedConfig`,
``model_type = "planted"``, registered with ``AutoConfig`` and ``AutoModelForCausalLM`` when
:mod:`tangentlab.validate.planted` is imported), saved with ``save_pretrained`` and loaded like any
checkpoint; :mod:`tangentlab.validate.planted.masked` is its masked-LM twin. Its sites follow
the family table (:mod:`tangentlab.empirical.loading.sites`): ``embed``, ``blocks.{l}.resid_pre``,
``blocks.{l}.attn_out``, ``blocks.{l}.resid_mid``, ``blocks.{l}.mlp_out``,
``blocks.{l}.resid_post`` and ``ln_final``. Every tensor is a pure function of the input ids.

**Activations** (the ``embed`` output; the blocks are exact identities, zero ``attn``/``mlp``
linears around a skip path, and ``ln_final`` is an identity, so every residual site carries the
same tensor). Coordinates are taken in the orthonormal ``frame`` (d×d, shape ``(d, d)``); its first
m columns span the planted tangent subspace S. Token v at position t, with context key c (a hash
of the last ``context_size`` ids inside the window), sits at

    h = frame · x(u_v + t_v ξ_c) + σ ζ_c + τ · topic_t + rogue + position-0 term,

- x(u) = (u, κ/2 |u|², 0, …): a paraboloid, a curved m-manifold of normal curvature κ at the
  origin; u_v (``centres``, shape (V, m)) is the token's base point in the chart;
- t_v (``spread``, shape (V,)): the token's spread, set by the trajectory writer to
  t_0 (f_v / f_max)^(-α) (clipped) from the token frequencies f of the training split: α is
  the pinning exponent;
- ξ_c ∈ R^m, ζ_c ∈ R^d: standard normals from a hash of the context (same context, same
  activation, as in a trained model); σ = ``noise_scale``;
- topic_t: the mean over the window's positions ≤ t of a fixed random vector per token id
  (document-level, bursty vocabulary); τ = ``topic_strength``;
- rogue: ``rogue_scale`` (1 + ξ'/2) on the standard axis ``rogue_dim`` (a rogue dimension);
- position 0: ``pos0_scale`` · √m added along the last standard axis at the first position of
  every window (a massive first-position activation);
- a per-position scale s_c = exp(ς ν_c − ς²), ν_c a standard normal from a hash of the context
  (ς = ``row_scale_sigma``; E[s_c²] = 1), multiplying the whole activation *and* the planted
  gradient direction w_c below: a lognormal scale mixture over rows, the heavy tails of trained
  residual streams (0 = none, s_c = 1).

**Loss.** The head reads the *next* input id y (a planted model is not a language model: its loss
is a designed function of the site activation and the target) and puts the logit β·F on y, 0 on
every other id (β = ``loss_scale``), so the per-token loss is log(V − 1 + e^{βF}) − βF, with

    F = w_c · (h − r_c e_rogue) − φ((h − h₀)ᵀ K (h − h₀)),

- w_c = frame · (g ⊙ (η_c + b 1/√d)), η_c a standard normal from a hash of the context
  independent of ξ, ζ, and b (``grad_bias``) a shared offset: with b > 0 the gradient has a mean
  −β(1 − p) frame (g ⊙ b 1/√d) that every context shares, so training the parameters upstream of
  a site (the blocks' zero ``attn``/``mlp`` linears) lowers the held-out loss, in the planted
  directions k times as fast per dimension (the learning-arms test needs that); b = 0 keeps a
  gradient that no shared parameter can follow. The offset is equal in every frame coordinate,
  so the second moment per dimension stays k (1 + b²/d) in S against (1 + b²/d) elsewhere;
  g (``grad_scale``, shape (d,)) holds √k on S (times ``token_gain`` of the row's token, shape
  (V,)) and 1 elsewhere. At the model's own activations (h = h₀) the gradient at any residual site is
  −β(1 − p_y) w_c: its second moment in S per dimension is k · E[gain²] times that of every other
  direction, up to the O(1/V) variation of p_y. The planted enrichment factor of S against normal
  controls is therefore k (times the mean squared gain of the rows considered);
- r_c e_rogue: the rogue offset (below), left out of the logit so that it moves no p_y. With
  it in, w·h swung by ±2 at offset 20, p_y varied with it, and the gradient energy along the
  rogue axis came out at 0.92 of the other axes': the ``rogue`` null was not null;
- h₀: the clean activation, recomputed inside the head from the ids (no hooks), so an edit of a
  site (ablation, steering) changes the loss only through φ;
- K = frame · diag(``cost``) · frameᵀ and φ (``cost_shape``): ``linear`` q, ``convex``
  q + c q², ``concave`` log(1 + c q)/c (c = ``cost_curvature``). Mean-ablating a subspace B adds
  β φ(q) with q = ‖P_B(h − μ)‖²_K per row: with an isotropic ``cost`` and a linear φ the loss
  depends only on the removed variance; a larger ``cost`` on S makes the planted directions matter.

Shapes: ``input_ids`` (B, T) int64; activations (B, T, d); logits (B, T, V).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

__all__ = ["PlantedConfig", "PlantedModel", "PlantedForCausalLM", "PlantedHead",
           "COST_SHAPES", "hash_normals", "context_keys", "planted_scores"]

COST_SHAPES = ("linear", "convex", "concave")
_M31 = 2**31 - 1
_P = 1_000_003


class PlantedConfig(PretrainedConfig):
    """Configuration of a planted model (what stays fixed along a trajectory).

    Args:
        vocab_size: ids the model accepts (V).
        hidden_size: d.
        num_hidden_layers: identity blocks (their sites all carry the embed tensor).
        planted_rank: m, the dimension of the planted tangent subspace S (m + 1 <= d).
        context_size: ids hashed into the context key (the last ones, inside the window). 12
            by default: with 4, a rare BPE piece nearly always follows the same few ids, so its
            occurrences share a key and the "no pinning" null would carry a real frequency-spread
            correlation (Spearman +0.14 on Wikipedia, against +0.04, not significant, with 12).
        curvature: κ, the paraboloid's normal curvature at the chart origin.
        noise_scale: σ, isotropic noise in every direction.
        topic_strength: τ, weight of the window-mean token vector (document vocabulary).
        rogue_dim: a rogue standard axis (-1 = none).
        rogue_scale: the rogue axis's offset.
        pos0_scale: first-position offset in units of √m (0 = none; 150 = a 150× position 0).
        loss_scale: β.
        cost_shape: φ (see the module docstring).
        cost_curvature: φ's c.
        grad_bias: b, the shared gradient offset (see the module docstring; 0 = none).
        row_scale_sigma: ς, the per-position lognormal scale (see the module docstring; 0 =
            none).
        salt: seed of the hashes (same salt, same model).
    """

    model_type = "planted"

    def __init__(self, vocab_size: int = 512, hidden_size: int = 32, num_hidden_layers: int = 2,
                 planted_rank: int = 4, context_size: int = 12, curvature: float = 0.3,
                 noise_scale: float = 0.1, topic_strength: float = 0.0, rogue_dim: int = -1,
                 rogue_scale: float = 0.0, pos0_scale: float = 0.0, loss_scale: float = 0.1,
                 cost_shape: str = "linear", cost_curvature: float = 0.5, salt: int = 0,
                 grad_bias: float = 0.0, row_scale_sigma: float = 0.0,
                 max_position_embeddings: int = 1024, **kwargs):
        if cost_shape not in COST_SHAPES:
            raise ValueError(f"cost_shape must be one of {COST_SHAPES}; got {cost_shape!r}")
        if not 1 <= planted_rank < hidden_size:
            raise ValueError(f"planted_rank must lie in [1, hidden_size); got {planted_rank}")
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.num_hidden_layers = int(num_hidden_layers)
        self.planted_rank = int(planted_rank)
        self.context_size = int(context_size)
        self.curvature = float(curvature)
        self.noise_scale = float(noise_scale)
        self.topic_strength = float(topic_strength)
        self.rogue_dim = int(rogue_dim)
        self.rogue_scale = float(rogue_scale)
        self.pos0_scale = float(pos0_scale)
        self.loss_scale = float(loss_scale)
        self.cost_shape = str(cost_shape)
        self.cost_curvature = float(cost_curvature)
        self.salt = int(salt)
        self.grad_bias = float(grad_bias)
        self.row_scale_sigma = float(row_scale_sigma)
        self.max_position_embeddings = int(max_position_embeddings)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


# ---------------------------------------------------------------------------------- hashing

def context_keys(input_ids, k: int):
    """Hash of the ``k`` ids around each position: the last ``k`` (position t and the k − 1 before).

    Positions t < k − 1, which have fewer ids before them inside the window, hash the window's
    first k ids and t instead, so that an occurrence near a window start is not shared by every
    window that starts with that token (which would shrink frequent tokens' spread). The same
    stream position in two overlapping windows, at offsets ≥ k − 1 in both, gets the same key.

    ``input_ids``: (B, T) int64. Returns (B, T) int64 in [0, 2^31 - 1).
    """
    ids = input_ids.long() + 1
    T = ids.shape[1]
    key = torch.zeros_like(ids)
    for j in range(k):
        shifted = torch.zeros_like(ids)
        shifted[:, j:] = ids[:, :T - j] if j else ids
        key = (key * _P + shifted) % _M31
    head = min(k, T) - 1
    if head > 0:
        t = torch.arange(head, device=ids.device)
        key[:, :head] = (key[:, head:head + 1] * _P + t[None, :] + 7) % _M31
    return key


def _mix(x):
    """Three rounds of a Lehmer step mod 2^31 − 1 and a xor-shift, **in place** on int64 ``x``."""
    for _ in range(3):
        x.mul_(48271).remainder_(_M31)
        x.bitwise_xor_(x >> 11)
    return x


#: Recently drawn :func:`hash_normals` on the CPU, by (keys, n, salt): a measurement forwards the
#: same eval windows at every checkpoint, so most draws repeat. Bounded (least recently used out).
_NORMALS: OrderedDict = OrderedDict()
_NORMALS_MAX = 1024


def _uniform(mixed):
    """Uniforms in (0, 1) from mixed integers in [0, 2^31).

    ``mixed`` mod (2^31 − 1), plus ½, over 2^31 − 1. The xor-shift of :func:`_mix` can return
    2^31 − 1 itself, which without the modulo gave u > 1, a negative logarithm under
    Box–Muller's square root, and a NaN activation (one simulation in about 600 of the full
    end-to-end setting hit it).
    """
    return (mixed % _M31).double().add_(0.5).div_(_M31)


def hash_normals(keys, n: int, salt: int):
    """Standard normals from integer keys: shape ``keys.shape + (n,)``, float64.

    A pure function of (key, salt): Box–Muller on uniforms from a mixed congruential hash. On the
    CPU a repeated draw is served from a bounded cache (a fresh copy: the same numbers).
    """
    if keys.device.type != "cpu":
        return _hash_normals(keys, n, salt)
    k = keys.long()
    memo = (k.numpy().tobytes(), tuple(k.shape), int(n), int(salt))
    hit = _NORMALS.get(memo)
    if hit is None:
        hit = _NORMALS[memo] = _hash_normals(k, n, salt)
        if len(_NORMALS) > _NORMALS_MAX:
            _NORMALS.popitem(last=False)
    else:
        _NORMALS.move_to_end(memo)
    return hit.clone()


def _hash_normals(keys, n: int, salt: int):
    """:func:`hash_normals` computed, uncached.

    In-place integer and float steps: the same bits as the plain expressions with fewer
    temporaries (a planted simulation spends about a quarter of its time here).
    """
    base = keys.long()[..., None] * 2654435761
    base.remainder_(_M31)
    base = base + ((salt * 97 + 1) * 40503 + torch.arange(2 * n, device=keys.device) * 69069)
    u = _uniform(_mix(base.remainder_(_M31)))
    u1, u2 = u[..., :n], u[..., n:]  # disjoint halves: each transformed in place
    # a fresh (..., n) product: the cache keeps n numbers per key, not a view of all 2n
    return torch.mul(u1.log_().mul_(-2.0).sqrt_(), u2.mul_(2.0 * math.pi).cos_())


# ---------------------------------------------------------------------------------- modules

def _frozen(shape, value: float = 0.0):
    return nn.Parameter(torch.full(shape, float(value)), requires_grad=False)


class PlantedEmbed(nn.Module):
    """The generative geometry: ids (B, T) → activations (B, T, d). Holds every planted tensor."""

    def __init__(self, config: PlantedConfig):
        super().__init__()
        d, m, V = config.hidden_size, config.planted_rank, config.vocab_size
        self.config = config
        self.frame = nn.Parameter(torch.eye(d), requires_grad=False)
        self.centres = _frozen((V, m))
        self.spread = _frozen((V,), 1.0)
        self.grad_scale = _frozen((d,), 1.0)
        self.token_gain = _frozen((V,), 1.0)
        self.cost = _frozen((d,), 1.0)

    def activations(self, input_ids, keys=None):
        """The clean activations (B, T, d), in the parameters' dtype (no hooks involved).

        The planted tensors enter detached: they are the generative truth, never trained
        (``from_pretrained`` may hand them back with ``requires_grad`` on). ``keys``: the
        :func:`context_keys` of ``input_ids`` when the caller has them already.
        """
        c = self.config
        d, m = c.hidden_size, c.planted_rank
        dt = self.frame.dtype
        if keys is None:
            keys = context_keys(input_ids, c.context_size)
        xi = hash_normals(keys, m, c.salt * 8 + 1).to(dt)
        u = self.centres.detach()[input_ids] + self.spread.detach()[input_ids][..., None] * xi
        x = torch.zeros(*input_ids.shape, d, dtype=dt, device=input_ids.device)
        x[..., :m] = u
        x[..., m] = 0.5 * c.curvature * (u * u).sum(-1)
        if c.noise_scale:
            x = x + c.noise_scale * hash_normals(keys, d, c.salt * 8 + 2).to(dt)
        h = x @ self.frame.detach().T
        if c.topic_strength:
            vec = hash_normals(input_ids.long(), d, c.salt * 8 + 3).to(dt)
            n = torch.arange(1, input_ids.shape[1] + 1, device=input_ids.device, dtype=dt)
            h = h + c.topic_strength * vec.cumsum(1) / n[None, :, None]
        rogue = self.rogue_offset(keys, dt)
        if rogue is not None:
            h[..., c.rogue_dim] = h[..., c.rogue_dim] + rogue
        if c.pos0_scale:
            h[:, 0, d - 1] = h[:, 0, d - 1] + c.pos0_scale * math.sqrt(m)
        scale = self.row_scale(keys, dt)
        return h if scale is None else h * scale[..., None]

    def row_scale(self, keys, dtype):
        """The per-position scale s_c = exp(ς ν_c − ς²), shape (B, T); None when ς = 0."""
        sigma = float(getattr(self.config, "row_scale_sigma", 0.0) or 0.0)
        if not sigma:
            return None
        nu = hash_normals(keys, 1, self.config.salt * 8 + 6).to(dtype)[..., 0]
        return torch.exp(sigma * nu - sigma * sigma)

    def rogue_offset(self, keys, dtype):
        """The rogue axis's offset r_c = ``rogue_scale`` (1 + ξ'/2) per position, shape (B, T).

        None without a rogue axis. ``keys``: the :func:`context_keys` of the ids.
        """
        c = self.config
        if c.rogue_dim < 0 or not c.rogue_scale:
            return None
        return c.rogue_scale * (1.0 + 0.5 * hash_normals(keys, 1, c.salt * 8 + 4).to(dtype)[..., 0])

    def gradient_directions(self, input_ids, keys=None):
        """w_c (B, T, d): the planted gradient direction of each position (see module docstring).

        ``keys``: the :func:`context_keys` of ``input_ids`` when the caller has them already.
        """
        c = self.config
        m = c.planted_rank
        if keys is None:
            keys = context_keys(input_ids, c.context_size)
        eta = hash_normals(keys, c.hidden_size, c.salt * 8 + 5).to(self.frame.dtype)
        if getattr(c, "grad_bias", 0.0):
            eta = eta + c.grad_bias / math.sqrt(c.hidden_size)
        g = self.grad_scale.detach().expand(*input_ids.shape, -1).clone()
        g[..., :m] = g[..., :m] * self.token_gain.detach()[input_ids][..., None]
        scale = self.row_scale(keys, self.frame.dtype)
        if scale is not None:
            g = g * scale[..., None]
        return (g * eta) @ self.frame.detach().T

    def forward(self, input_ids):
        """The site ``embed``: the activations (B, T, d).

        Inside :meth:`PlantedForCausalLM.forward` the head has computed the clean activations of
        these very ids already; the site then returns a copy of them (the same numbers, a fresh
        tensor, so a hook that edits or marks the site output leaves the head's h₀ alone).
        """
        clean = getattr(self, "_clean", None)
        if clean is not None and clean[0] is input_ids:
            return clean[1].clone()
        return self.activations(input_ids)


class PlantedBlock(nn.Module):
    """``x + attn(x)``, then ``+ mlp(.)``; both linears are zero, so the block is the identity."""

    def __init__(self, config: PlantedConfig):
        super().__init__()
        d = config.hidden_size
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Linear(d, d)

    def forward(self, x):
        """(B, T, d) → (B, T, d)."""
        mid = x + self.attn(x)
        return mid + self.mlp(mid)


class PlantedFinal(nn.Module):
    """The site ``ln_final``: an identity map (a planted model has no norm)."""

    def forward(self, x):
        """(B, T, d) → (B, T, d), unchanged."""
        return x


class PlantedPreTrainedModel(PreTrainedModel):
    """Shared ``transformers`` plumbing of the planted family."""

    config_class = PlantedConfig
    base_model_prefix = "planted"
    _no_split_modules: list[str] = []
    main_input_name = "input_ids"

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            with torch.no_grad():
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()


class PlantedModel(PlantedPreTrainedModel):
    """The base model: ``embed``, ``blocks``, ``ln_final`` (sites of the family table)."""

    def __init__(self, config: PlantedConfig):
        super().__init__(config)
        self.embed = PlantedEmbed(config)
        self.blocks = nn.ModuleList([PlantedBlock(config) for _ in range(config.num_hidden_layers)])
        self.ln_final = PlantedFinal()
        self.post_init()

    def get_input_embeddings(self):
        """None: the planted embedding is a generative map, not a lookup table."""
        return None

    def forward(self, input_ids, attention_mask=None, **kwargs):
        """Activations at ``ln_final``, shape (B, T, d)."""
        h = self.embed(input_ids)
        for blk in self.blocks:
            h = blk(h)
        return self.ln_final(h)


def _phi(q, shape: str, c: float):
    if shape == "linear":
        return q
    if shape == "convex":
        return q + c * q * q
    return torch.log1p(c * q) / c


def planted_scores(planted: PlantedModel, input_ids):
    """F per position (B, T): w_c · h − φ((h − h₀)ᵀ K (h − h₀)), the rogue offset left out.

    ``planted``: the base model (its ``embed`` holds the planted tensors); h is what its sites
    carry (hooks may edit it), h₀ the clean activations recomputed from the ids. The loss heads
    of the family read F (module docstring).
    """
    c = planted.config
    emb = planted.embed
    keys = context_keys(input_ids, c.context_size)
    h0 = emb.activations(input_ids, keys)
    emb._clean = (input_ids, h0)  # the site returns a copy: computed once, not twice
    try:
        h = planted(input_ids)
    finally:
        emb._clean = None
    w = emb.gradient_directions(input_ids, keys)
    diff = h - h0
    q = ((diff @ emb.frame.detach()) ** 2 * emb.cost.detach()).sum(-1)
    F = (w * h).sum(-1) - _phi(q, c.cost_shape, c.cost_curvature)
    rogue = emb.rogue_offset(keys, h.dtype)
    if rogue is not None:  # the offset moves no logit: dF/dh stays w_c, p_y stays put
        scale = emb.row_scale(keys, h.dtype)
        F = F - w[..., c.rogue_dim] * (rogue if scale is None else rogue * scale)
    return F


class PlantedHead(PlantedPreTrainedModel):
    """A base model (``planted``) under a loss head that reads :func:`planted_scores`."""

    def __init__(self, config: PlantedConfig):
        super().__init__(config)
        self.planted = PlantedModel(config)
        self.post_init()

    def get_input_embeddings(self):
        """None (see :meth:`PlantedModel.get_input_embeddings`)."""
        return None

    def get_output_embeddings(self):
        """None: the head has no weight matrix."""
        return None


class PlantedForCausalLM(PlantedHead):
    """A planted model with its designed loss head (the logit β·F on the next input id)."""

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        """Logits (B, T, V); ``labels`` (B, T) give the mean next-token loss, as for a causal LM."""
        c = self.config
        F = planted_scores(self.planted, input_ids)
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, :1]], dim=1)  # the last column: no target
        logits = torch.zeros(*input_ids.shape, c.vocab_size, dtype=F.dtype, device=F.device)
        logits = logits.scatter(-1, nxt[..., None], (c.loss_scale * F)[..., None])
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, c.vocab_size).float(),
                                               labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)
