"""Trajectories of planted checkpoints, written in the layout of a training run.

:func:`write_trajectory` writes what :func:`tangentlab.empirical.training.train.train_model` writes
(``train_config.json``, ``tokenizer/``, ``frequency.csv``, ``eval.jsonl``,
``checkpoints/step_NNNNNN/`` with ``config.json``, ``model.safetensors``, the tokenizer and
``train_state.json``, then ``manifest.json``), so ``measure`` resolves and measures it like any run.
The text is real: :func:`shared_text` loads a built-in corpus (Wikipedia by default) through
:mod:`tangentlab.empirical.loading.corpus`, splits it, trains a byte-level BPE and counts the training
split's token frequencies, once per harness run.

:class:`PlantedSpec` says what is planted and how it moves over training (x = step / last step):

- enrichment factor k(x) of the planted subspace S (``curve``): ``none`` (1 everywhere),
  ``flat`` (1 at step 0, ``k_end`` after), ``plateau`` (rises to ``k_end`` at x = ``x_peak``,
  then flat), ``slow_rise`` (rises linearly to ``k_end`` at the last step), ``weaken`` (rises to
  ``k_peak`` at ``x_peak``, then falls linearly to ``k_end``);
- ``drift_deg``: S rotates by this angle (in m planes shared with normal directions) between
  step 0 and the last step, while the relation (k in the *current* S) follows ``curve``;
- ``gain_exponent`` γ: the S part of a row's gradient is scaled by gain_v with gain_v² ∝ f_v^γ
  (normalised to an occurrence-weighted mean of 1), so frequent tokens are more enriched;
- ``alpha``: pinning exponent reached at the last step, t_v = ``t_ref`` ((f_v + 1)/(f_med +
  1))^(-α x) clipped to [``t_ref``/4, 4 ``t_ref``] (f_med: the occurrence-weighted median
  count). Pinning grows with training, from none at step 0 (x = 0) to α at the last step: the
  frequency–distance row reads "supported" only when the last checkpoint's correlation is not
  above step 0's, and with fresh draws per checkpoint (:func:`checkpoint_salt`) a pinning
  already full at step 0 left that comparison a coin flip (issue 33: power 0/4 at the standard
  setting);
- ``cost_ratio``: the ablation cost per unit of removed variance along S relative to every other
  direction (1: the loss depends only on the removed variance), ``cost_shape`` φ;
- ``grad_bias``: the gradient's shared offset b (1 by default: a mean the blocks upstream of a
  site can learn, so the learning-arms test has something to train; it leaves the enrichment
  factor k exact);
- ``topic``, ``rogue_scale``, ``pos0_scale``, ``row_scale_sigma``, ``curvature``, ``noise``: see
  :class:`~tangentlab.validate.planted.PlantedConfig`; ``eval_tokens`` > 0 cuts the eval text to
  about that many tokens (short eval text: overlapping windows);
- ``arch``: ``decoder`` (the causal-LM head, :class:`~tangentlab.validate.planted.PlantedForCausalLM`)
  or ``encoder`` (the masked-LM head, :class:`~tangentlab.validate.planted.PlantedForMaskedLM`,
  whose sink is the tokenizer's mask token): the measurement takes its decoder or encoder path
  from the checkpoint, as for a trained model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError

__all__ = ["PlantedSpec", "SharedText", "shared_text", "write_trajectory", "enrichment_curve",
           "checkpoint_salt", "planted_checkpoints", "CURVES", "ARCHS", "zipf_exponent"]

CURVES = ("none", "flat", "plateau", "slow_rise", "weaken")
#: The planted heads, by the architecture they twin.
ARCHS = ("decoder", "encoder")


@dataclass(frozen=True)
class PlantedSpec:
    """What a planted trajectory plants (see the module docstring). Shapes: d = ``d``, m = ``m``."""

    d: int = 32
    m: int = 4
    steps: tuple[int, ...] = (0, 25, 50, 100)
    curve: str = "none"
    k_peak: float = 6.0
    k_end: float = 3.0
    x_peak: float = 0.3
    drift_deg: float = 0.0
    gain_exponent: float = 0.0
    alpha: float = 0.0
    t_ref: float = 0.5
    centre_scale: float = 1.0
    curvature: float = 0.3
    noise: float = 0.6
    cost_ratio: float = 1.0
    cost_shape: str = "linear"
    cost_curvature: float = 0.5
    topic: float = 0.0
    rogue_scale: float = 0.0
    pos0_scale: float = 0.0
    row_scale_sigma: float = 0.0
    loss_scale: float = 0.1
    grad_bias: float = 1.0
    seq_len: int = 64
    eval_tokens: int = 0
    seed: int = 0
    arch: str = "decoder"

    def check(self) -> None:
        """ConfigError for a spec that cannot be planted."""
        if self.arch not in ARCHS:
            raise ConfigError(f"arch must be one of {', '.join(ARCHS)}; got {self.arch!r}")
        if self.curve not in CURVES:
            raise ConfigError(f"curve must be one of {', '.join(CURVES)}; got {self.curve!r}")
        if 2 * self.m + 1 > self.d:
            raise ConfigError(f"planted rank m={self.m} needs d >= 2m + 1 = {2 * self.m + 1} "
                              f"(drift planes and the curvature direction); got d={self.d}")
        steps = list(self.steps)
        if len(steps) < 2 or steps != sorted(set(steps)) or steps[0] != 0:
            raise ConfigError(f"steps must be increasing, distinct and start at 0; got {steps}")
        if not 0 < self.x_peak < 1:
            raise ConfigError(f"x_peak must lie in (0, 1); got {self.x_peak}")


def enrichment_curve(spec: PlantedSpec, x: float) -> float:
    """The planted enrichment factor k at training fraction ``x`` in [0, 1]."""
    if spec.curve == "none" or x <= 0:
        return 1.0
    if spec.curve == "flat":
        return spec.k_end
    if spec.curve == "plateau":
        return 1.0 + (spec.k_end - 1.0) * min(1.0, x / spec.x_peak)
    if spec.curve == "slow_rise":
        return 1.0 + (spec.k_end - 1.0) * x
    if x <= spec.x_peak:
        return 1.0 + (spec.k_peak - 1.0) * x / spec.x_peak
    return spec.k_peak + (spec.k_end - spec.k_peak) * (x - spec.x_peak) / (1.0 - spec.x_peak)


@dataclass
class SharedText:
    """Text shared by every trajectory of one harness run.

    Attributes:
        corpus: the built-in corpus name.
        tokenizer: the trained BPE (a ``PreTrainedTokenizerFast``).
        counts: training-split token counts, shape (V,), int64.
        eval_docs: the held-out documents.
        zipf: the rank–frequency slope of the training split (negative; about -1 for text).
    """

    corpus: str
    tokenizer: Any
    counts: Any
    eval_docs: tuple[str, ...]
    zipf: float


def zipf_exponent(counts) -> float:
    """Least-squares slope of log count against log rank over the 2nd–500th ranked tokens."""
    import numpy as np

    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    c = c[c > 0][1:500]
    if c.size < 3:
        return float("nan")
    r = np.arange(2, c.size + 2, dtype=np.float64)
    return float(np.polyfit(np.log(r), np.log(c), 1)[0])


def shared_text(corpus: str = "wikipedia", vocab_size: int = 512, *, seed: int = 0,
                max_train_tokens: int = 400_000) -> SharedText:
    """Load ``corpus`` through the normal corpus code, train the BPE, count the training split."""
    from tangentlab.empirical.loading.corpus import frequency_table, load_texts, split_texts
    from tangentlab.empirical.loading.tokenizer import encode_stream, train_tokenizer

    split = split_texts(load_texts(corpus), 0.1, seed=seed)
    tok = train_tokenizer(split.train, vocab_size)
    stream = encode_stream(tok, list(split.train), max_tokens=max_train_tokens)
    counts = frequency_table(stream, len(tok))
    return SharedText(corpus=corpus, tokenizer=tok, counts=counts, eval_docs=tuple(split.eval),
                      zipf=zipf_exponent(counts))


#: Tokens per document of a cut eval text (the short-eval null): short documents, so that a cut
#: text still holds tokens in the distinct documents the frequency-distance row needs.
SHORT_DOC_TOKENS = 48


def _eval_docs(text: SharedText, n_tokens: int) -> list[str]:
    """The eval documents, cut to about ``n_tokens`` tokens when ``n_tokens`` > 0.

    A cut text is split into documents of :data:`SHORT_DOC_TOKENS` tokens: the few long
    articles of a short text leave no token in the 4 distinct documents the per-token geometry
    needs, so the frequency-distance row stored nothing under the short-eval null and could not
    fail there (issue 33).
    """
    if n_tokens <= 0:
        return list(text.eval_docs)
    out, total = [], 0
    for doc in text.eval_docs:
        ids = text.tokenizer(doc, add_special_tokens=False)["input_ids"]
        ids = ids[: max(0, n_tokens - total)]
        for i in range(0, len(ids), SHORT_DOC_TOKENS):
            out.append(text.tokenizer.decode(ids[i:i + SHORT_DOC_TOKENS]))
            total += len(ids[i:i + SHORT_DOC_TOKENS]) + 1
        if total >= n_tokens:
            break
    return out


def _occurrence_stats(counts):
    """(log(count + 1) per id, occurrence-weighted mean of it, occurrence-weighted median count)."""
    import numpy as np

    c = np.asarray(counts, dtype=np.float64)
    logf = np.log1p(c)
    w = c / max(c.sum(), 1.0)
    order = np.argsort(c)
    cum = np.cumsum(w[order])
    med = float(c[order][min(np.searchsorted(cum, 0.5), len(c) - 1)])
    return logf, float((w * logf).sum()), med, w


def planted_tensors(spec: PlantedSpec, counts, step: int) -> dict[str, Any]:
    """The planted parameters at ``step``: name (as in the state dict, under ``planted.embed.``) → array."""
    import numpy as np

    d, m = spec.d, spec.m
    V = len(counts)
    rng = np.random.default_rng([spec.seed, 18])
    frame0, _ = np.linalg.qr(rng.standard_normal((d, d)))
    centres = spec.centre_scale * rng.standard_normal((V, m))
    x = step / max(spec.steps)
    theta = math.radians(spec.drift_deg) * x
    frame = frame0.copy()
    for i in range(m):  # rotate S toward normal directions m+1+i (m itself holds the curvature)
        a, b = frame0[:, i], frame0[:, m + 1 + i]
        frame[:, i] = math.cos(theta) * a + math.sin(theta) * b
        frame[:, m + 1 + i] = -math.sin(theta) * a + math.cos(theta) * b
    logf, mean_logf, med, w = _occurrence_stats(counts)
    spread = spec.t_ref * ((np.asarray(counts, dtype=np.float64) + 1) / (med + 1)) ** (
        -spec.alpha * x)
    spread = np.clip(spread, spec.t_ref / 4, 4 * spec.t_ref)
    gain2 = np.exp(spec.gain_exponent * (logf - mean_logf))
    gain2 /= max(float((w * gain2).sum()), 1e-12)
    k = enrichment_curve(spec, x)
    grad_scale = np.ones(d)
    grad_scale[:m] = math.sqrt(k)
    cost = np.ones(d)
    cost[:m] = spec.cost_ratio
    return {"frame": frame, "centres": centres, "spread": spread, "grad_scale": grad_scale,
            "token_gain": np.sqrt(gain2), "cost": cost}


def planted_config(spec: PlantedSpec, vocab_size: int, seq_len: int, *, sink_id: int = 3):
    """The planted config of ``spec`` (fixed along a trajectory), for its ``arch``'s head.

    A :class:`~tangentlab.validate.planted.PlantedConfig` for a decoder, a
    :class:`~tangentlab.validate.planted.PlantedMaskedConfig` (with ``sink_id``, the mask token's
    id) for an encoder.
    """
    from tangentlab.validate.planted import PlantedConfig, PlantedMaskedConfig

    kw = dict(
        vocab_size=vocab_size, hidden_size=spec.d, num_hidden_layers=2, planted_rank=spec.m,
        curvature=spec.curvature, noise_scale=spec.noise, topic_strength=spec.topic,
        rogue_dim=0 if spec.rogue_scale else -1, rogue_scale=spec.rogue_scale,
        pos0_scale=spec.pos0_scale, row_scale_sigma=spec.row_scale_sigma,
        loss_scale=spec.loss_scale, cost_shape=spec.cost_shape,
        cost_curvature=spec.cost_curvature, salt=spec.seed, grad_bias=spec.grad_bias,
        max_position_embeddings=max(1024, seq_len))
    if spec.arch == "encoder":
        return PlantedMaskedConfig(sink_id=sink_id, **kw)
    return PlantedConfig(**kw)


def checkpoint_salt(spec: PlantedSpec, index: int) -> int:
    """The hash salt of checkpoint ``index``: a fresh draw of the context normals per checkpoint.

    The truth (frame, centres, spreads, the enrichment curve, the costs) is a function of the
    step; what the truth leaves free (each context's ξ, ζ, η and row scale) is drawn anew at every
    checkpoint, so a null's checkpoints differ by sampling noise as a real trajectory's do, and a
    wrong status that compares checkpoints (enrichment against step 0, a late decline or rise) is
    reachable (issue 33: with one salt per trajectory every static null's last checkpoint equalled
    its step 0 exactly). Checkpoint 0 keeps ``spec.seed``.
    """
    return int(spec.seed) if index == 0 else (int(spec.seed) * 1_000_003 + 7919 * index) % (2**31 - 1)


def planted_checkpoints(spec: PlantedSpec, counts, vocab_size: int, *, sink_id: int = 3):
    """Yield ``(step, model)`` for every checkpoint of ``spec``, in step order, in memory.

    One model of ``spec.arch``'s head is reused (:func:`planted_config`; ``sink_id``: the mask
    token's id, read by the encoder's head): at each checkpoint its salt is
    :func:`checkpoint_salt` (fresh context draws) and its planted tensors those of
    :func:`planted_tensors` at the step. Use (or save) the model before asking for the next one.

    For an encoder the mask token's ``token_gain`` is 1, the occurrence-weighted mean gain. A
    masked position's activation and gradient are keyed by its input id, the mask token, which
    never occurs in the training text: with the gain of a zero count, γ > 0 scaled S down at
    every masked row, the rows that carry most of an encoder's gradient energy, and the
    ``effect`` scenario's encoder units read an enrichment of 0.34 at step 0 (k = 1) and about 1
    at its last checkpoint (k = 3). A masked row cannot carry its *true* token's gain (the head
    never sees the label), so in an encoder the frequency gain lives on the unmasked rows.
    """
    import torch

    from tangentlab.validate.planted import PlantedForCausalLM, PlantedForMaskedLM

    encoder = spec.arch == "encoder"
    head = PlantedForMaskedLM if encoder else PlantedForCausalLM
    model = head(planted_config(spec, vocab_size, spec.seq_len, sink_id=sink_id))
    embed = model.planted.embed
    for i, step in enumerate(spec.steps):
        model.config.salt = checkpoint_salt(spec, i)  # fresh context draws at every checkpoint
        tensors = planted_tensors(spec, counts, step)
        if encoder:  # a masked row's gain: the mean gain, not the unseen mask token's (0 count)
            tensors["token_gain"][sink_id] = 1.0
        with torch.no_grad():
            for name, value in tensors.items():
                getattr(embed, name).copy_(torch.as_tensor(value, dtype=torch.float32))
        yield int(step), model


def write_trajectory(spec: PlantedSpec, out_dir: str | Path, text: SharedText) -> Path:
    """Write the planted trajectory of ``spec`` into ``out_dir`` (a training-run layout).

    Returns ``out_dir``. Every file is written under a temporary name and renamed; the run's
    ``manifest.json`` comes last.
    """
    from tangentlab._runtime import quiet_transformers
    from tangentlab.empirical.loading.corpus import save_frequency_table
    from tangentlab.runs import atomic_write_json, atomic_write_text, build_manifest, write_manifest

    spec.check()
    quiet_transformers()
    run = Path(out_dir)
    run.mkdir(parents=True, exist_ok=True)
    tok = text.tokenizer
    vocab = len(tok)
    cfg_dict = {"arch": "planted", "corpus": text.corpus, "seq_len": spec.seq_len, "threads": 1,
                "planted": dataclasses.asdict(spec)}
    atomic_write_json(run / "train_config.json", cfg_dict)
    tok_tmp = Path(tempfile.mkdtemp(prefix=".tokenizer.partial-", dir=run))
    tok.save_pretrained(str(tok_tmp))
    os.replace(tok_tmp, run / "tokenizer")
    save_frequency_table(text.counts, run / "frequency.csv")
    atomic_write_text(run / "eval.jsonl", "".join(json.dumps({"text": t}) + "\n"
                                                  for t in _eval_docs(text, spec.eval_tokens)))
    root = run / "checkpoints"
    root.mkdir(exist_ok=True)
    ks = {}
    if spec.arch == "encoder" and tok.mask_token_id is None:
        raise ConfigError("a planted encoder needs a tokenizer with a mask token")
    sink = 3 if tok.mask_token_id is None else int(tok.mask_token_id)
    for step, model in planted_checkpoints(spec, text.counts, vocab, sink_id=sink):
        final = root / f"step_{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=root))
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "train_state.json").write_text(json.dumps({"step": int(step)}) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        ks[int(step)] = enrichment_curve(spec, step / max(spec.steps))
    write_manifest(run, build_manifest(
        kind="validate/planted-trajectory", config=cfg_dict, seeds={"seed": spec.seed},
        extra={"planted_enrichment": ks, "zipf_slope_train_split": text.zipf,
               "vocab_size": vocab}))
    return run
