"""What every checkpoint of one measured trajectory shares, prepared once (``measure``).

:func:`prepare` loads the first checkpoint and its tokenizer, resolves the sites and builds the
fixed eval rows (:func:`eval_inputs`: the eval text and the frequency counts, with the record of
where each came from); :func:`load_checkpoint` loads any other checkpoint like the first;
:func:`fixed_proxies` is the one-process pre-pass that fits each site's fixed proxy on the fit
window. :mod:`tangentlab.empirical.measurement.protocol` runs the checkpoints on this plan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tangentlab.empirical.measurement.collect import prefetch_fit_halves
from tangentlab.empirical.measurement.measure_config import MeasureConfig
from tangentlab.empirical.measurement.records import RowPlan
from tangentlab.errors import CheckpointError

__all__ = ["FREQUENCY_TOKENS_CAP", "Setup", "eval_inputs", "layer_of", "prepare",
           "load_checkpoint", "fixed_proxies"]


#: tokens of the frequency split counted at most (the count stops there)
FREQUENCY_TOKENS_CAP = 2_000_000


def eval_inputs(traj, tokenizer, cfg: MeasureConfig, vocab: int):
    """(eval texts, frequency-split counts, frequency source, corpus, split record).

    The counts are None when ``cfg.frequency_table`` replaces them (the caller reads it). The
    split record says where the eval text came from and how ``eval_text`` was divided:
    ``eval_fraction`` and the documents and tokens on each side (the manifest's ``eval_split``).
    """
    from tangentlab.empirical.loading.corpus import (
        frequency_table,
        load_frequency_table,
        load_texts,
        split_texts,
    )
    from tangentlab.empirical.loading.tokenizer import encode_stream

    tc = traj.train_config
    corpus = cfg.eval_text or tc.get("corpus") or "wikipedia"

    def corpus_split():
        return split_texts(load_texts(corpus, max_docs=cfg.max_docs, text_column=cfg.text_column),
                           cfg.eval_fraction, seed=cfg.seed)

    if traj.eval_file is not None and not cfg.eval_text:
        # the training run's own held-out documents: no corpus parsing needed
        eval_texts = load_texts(traj.eval_file)
        split, origin = None, "the training run's held-out documents (eval.jsonl)"
    else:
        split, origin = corpus_split(), f"{corpus!r}, split by eval_fraction"
        eval_texts = list(split.eval)
    counts, source, freq = None, "", {"documents": None, "tokens": None, "counted": False}
    if cfg.frequency_table:
        source = "frequency_table (read by the caller)"
    elif traj.frequency_file is not None and not cfg.eval_text:
        counts = load_frequency_table(traj.frequency_file)
        source = "run frequency.csv (training split)"
        if len(counts) < vocab:
            counts = None
        else:
            freq["tokens"] = int(counts.sum())
    if counts is None and not cfg.frequency_table:
        if split is None:
            split = corpus_split()
        stream = encode_stream(tokenizer, list(split.train), max_tokens=FREQUENCY_TOKENS_CAP)
        counts = frequency_table(stream, max(vocab, int(stream.max()) + 1))
        source = f"recomputed on the {corpus!r} training split ({stream.size} tokens)"
        freq.update(tokens=int(stream.size), counted=True,
                    capped=bool(stream.size >= FREQUENCY_TOKENS_CAP))
    if split is not None:
        freq["documents"] = len(split.train)
    n_eval_tokens = int(encode_stream(tokenizer, eval_texts).size)
    record = {"eval_text": origin, "eval_fraction": cfg.eval_fraction if split else None,
              "text_column": cfg.text_column, "max_docs": cfg.max_docs,
              "rule": "each document goes to eval when a hash of (seed, index, text) falls below "
                      "eval_fraction (at least one document on each side)",
              "eval": {"documents": len(eval_texts), "tokens": n_eval_tokens},
              "frequency": freq, "counts_from": source}
    return eval_texts, counts, source, corpus, record


def layer_of(site: str) -> int | None:
    """The block index of a site name (``blocks.3.resid_post`` -> 3), else None."""
    m = re.match(r"blocks\.(\d+)\.", site)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Setup:
    """What every checkpoint of one trajectory shares: the first model, sites and eval rows."""

    first: Any
    first_name: str
    tokenizer: Any
    sites: tuple[str, ...]
    d: int
    eval_data: Any
    plans: tuple[RowPlan, ...]
    uniq: Any
    seq_len: int
    corpus: str
    proxies: Mapping[str, Any] = field(default_factory=dict)  #: site → preflight.SiteProxy
    eval_split: dict = field(default_factory=dict)


def prepare(traj, cks, cfg: MeasureConfig, dev: str, timer, pf=None) -> Setup:
    """Load the first checkpoint and its tokenizer, resolve the sites, build the eval rows.

    ``pf``: the :class:`~tangentlab.empirical.measurement.preflight.Preflight` of this trajectory.
    """
    from tangentlab.empirical.loading.data import make_eval_data
    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.loading.tokenizer import check_tokenizer_fits, load_tokenizer
    from tangentlab.empirical.measurement.collect import plan_rows
    from tangentlab.empirical.measurement.preflight import loaded_site_plan
    from tangentlab.progress import status

    with timer("load"), status(f"loading checkpoint {cks[0].name} and its tokenizer"):
        first = load_model(cks[0].path, device=dev, gguf_file=cks[0].gguf_file, dtype=cfg.dtype)
        if cks[0].gguf_file:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(cks[0].path), gguf_file=cks[0].gguf_file)
        else:
            tokenizer = load_tokenizer(traj.tokenizer_dir)
    sites, d, proxies = loaded_site_plan(pf, first.model, cfg)
    with timer("data"), status("loading and tokenizing the eval text"):
        vocab = check_tokenizer_fits(tokenizer, first.model.config)
        texts, counts, freq_source, corpus, split_rec = eval_inputs(traj, tokenizer, cfg, vocab)
        if cfg.frequency_table:  # an external table (e.g. pre-training counts) replaces the count
            from tangentlab.empirical.loading.corpus import load_external_counts

            counts, freq_source = load_external_counts(cfg.frequency_table, tokenizer,
                                                       first.model.config)
            split_rec["counts_from"] = freq_source
        mc = first.model.config
        max_pos = getattr(mc, "max_position_embeddings", getattr(mc, "n_positions", 512))
        seq_len = min(cfg.seq_len or int(traj.train_config.get("seq_len", 128)), int(max_pos))
        eval_data = make_eval_data(
            tokenizer, first.arch, texts=texts, counts=counts, frequency_source=freq_source,
            n_batches=cfg.n_batches, batch_size=cfg.batch_size, seq_len=seq_len,
            seed=cfg.seed, n_buckets=cfg.n_buckets,
        )
        plans, uniq = plan_rows(eval_data, first.arch, exclude_positions=cfg.exclude_positions,
                                sample_rows=cfg.sample_rows, seed=cfg.seed)
    return Setup(first=first, first_name=cks[0].name, tokenizer=tokenizer, sites=sites, d=d, eval_data=eval_data,
                  plans=tuple(plans), uniq=uniq, seq_len=seq_len, corpus=corpus,
                  proxies=proxies, eval_split=split_rec)


def load_checkpoint(setup: Setup, ck, dev: str):
    """The model of checkpoint ``ck`` (the first one is already loaded)."""
    from tangentlab.empirical.loading.models import load_like

    if ck.name == setup.first_name:
        return setup.first
    lm = load_like(setup.first, ck.path, device=dev)
    if lm.arch != setup.first.arch:
        raise CheckpointError(
            f"checkpoint {ck.name!r} is a {lm.arch} but the trajectory is a {setup.first.arch}; "
            "a trajectory cannot mix architectures")
    return lm


def fixed_proxies(setup: Setup, schedule, cks, dev: str, timer, skip=frozenset()
                   ) -> tuple[dict[str, Any], dict[int, dict]]:
    """The pre-pass: the fixed proxy of each site from the fit window.

    The pre-pass: forward passes over the fit half of the fit-window checkpoints, then the
    fixed proxy of each site from their samples (weighted by step span). Their whole fit halves
    are kept for the main pass within a memory budget
    (:func:`tangentlab.empirical.measurement.collect.prefetch_fit_halves`). Returns ``(fixed {site: proxy},
    kept {checkpoint index: {site: SiteStats}})``. ``skip``: indices already measured (a resumed
    run), whose fit half is not kept.
    """
    window = [schedule.in_window(ck.step) for ck in cks]
    got, kept = prefetch_fit_halves(
        [(i, ck, w, w and i not in skip) for i, (ck, w) in enumerate(zip(cks, window))],
        lambda ck: load_checkpoint(setup, ck, dev), setup.sites, setup.eval_data, setup.plans,
        setup.uniq, timer)
    with timer("proxy_fit"):
        return {site: schedule.fit_fixed({cks[i].step: got[i][site] for i in got}, site)
                for site in setup.sites}, kept
