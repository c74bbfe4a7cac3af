"""Scoring a plan's shards with the loaded model into the cache entry: batches of windows into rows,
the shard loop, and the manifest.

An entry's manifest as the extractor writes it: model, corpus, settings, provenance, and the
scored checkpoint's place in training (manifest only: never in a cache key).

The one shard loop (`compute_shards`) that `extract`, the runner's work units and the CLI share.

Shards are claimed one at a time so no two processes compute one; each finished shard is written
atomically by a writer thread while the next is scored, and the entry is finalised (its manifest,
below) when every shard exists, whoever computed them. `sound_shards` says
which shards on disk can be kept before the loop starts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rbplab.catalog import registry
from rbplab.core.errors import InvalidArgumentError
from rbplab.extraction.heads import RankHead
from rbplab.extraction.plan import Plan, config_layers
from rbplab.extraction.precision import pinned_precision
from rbplab.extraction.ranks import NonFiniteLogitsError
from rbplab.extraction.weights import input_device, numerics_record
from rbplab.extraction.windows import Window, scored_position
from rbplab.store.cache.entry import CacheEntry

PAD_MULTIPLE = 64


def padded_length(length: int, context_length: int) -> int:
    """Sequence length a window is run at: a function of the window alone (batch invariance)."""
    return min(context_length, -(-length // PAD_MULTIPLE) * PAD_MULTIPLE)


def batches(
    windows: list[Window], batch_tokens: int, context_length: int
) -> Iterator[tuple[int, list[Window]]]:
    """(padded length, windows) groups: equal padded length, stable order, as many windows as fit
    `batch_tokens` padded tokens (at least one), so short windows make batches as large as long ones."""
    by_length: dict[int, list[Window]] = {}
    for window in windows:
        by_length.setdefault(padded_length(len(window.input_ids), context_length), []).append(window)
    for length in sorted(by_length):
        group = by_length[length]
        size = max(1, batch_tokens // length)
        for start in range(0, len(group), size):
            yield length, group[start : start + size]


def batch_arrays(group: list[Window], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded input ids [B, length], flat row index of each scored target's predicting
    position in [B * length], and the target ids, in window order."""
    ids = np.full((len(group), length), pad_id, dtype=np.int64)
    rows, targets = [], []
    for b, window in enumerate(group):
        ids[b, : len(window.input_ids)] = window.input_ids
        target_rows = window.target_rows()
        rows.append(b * length + target_rows - 1)
        targets.append(window.input_ids[target_rows])
    return ids, np.concatenate(rows), np.concatenate(targets)


# Where transformers keeps the final norm, on the base model or its decoder (OPT).
FINAL_NORMS = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm")


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The norm the model applies to its last block's output before its head: what the logit lens
    applies to every earlier layer. One line (InvalidArgumentError) when none is found, or when
    the body projects its states before the head (OPT-350m's project_out), which the lens would miss."""
    base = model.base_model
    holders = [base, getattr(base, "decoder", None)]
    name = type(model).__name__
    if any(getattr(holder, "project_out", None) is not None for holder in holders):
        raise InvalidArgumentError(
            f"{name} projects its states before its head (project_out), which the logit lens does not "
            "apply; leave --layers out to score its final layer"
        )
    for holder in holders:
        for attribute in FINAL_NORMS:
            norm = getattr(holder, attribute, None)
            if isinstance(norm, torch.nn.Module):
                return norm
    raise InvalidArgumentError(
        f"{name} has no final norm rbplab can find (base model's {', '.join(FINAL_NORMS)}), which the "
        "logit lens reads earlier layers through; leave --layers out to score its final layer"
    )


def model_blocks(model: torch.nn.Module, n_layers: int) -> torch.nn.ModuleList:
    """The base model's list of its `n_layers` blocks (the first ModuleList of that length: layers,
    h, decoder.layers), whose outputs are the residual stream after each layer; one line when none."""
    for module in model.base_model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    raise InvalidArgumentError(
        f"{type(model).__name__} has no list of its {n_layers} layers rbplab can find; leave --layers "
        "out to score its final layer"
    )


class Scorer:
    """Runs windows through a loaded model: base model forward, then exact ranks from its head
    (`rbplab.extraction.heads.RankHead`: the fp32 head or the fused kernel).

    A layer is an index into the model's blocks, None standing for the final layer: the base
    model's last hidden state, which already carries the final norm, so the head reads it as it
    is. A layer before the last is read through the logit lens: its block's output at the scored
    rows only (a forward hook keeps nothing else), through the final norm (`final_norm`), then the
    same head. One forward pass yields every layer asked for."""

    def __init__(
        self,
        model: torch.nn.Module,
        vocab_size: int,
        pad_id: int,
        softcap: float | None = None,
        head: str = "fp32",
    ):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.softcap = softcap
        self.device = input_device(model)
        self.head = RankHead(head, model.get_output_embeddings(), vocab_size, softcap)
        # the lens's modules, found when a layer before the last is first asked for
        self._lens: tuple[torch.nn.ModuleList, torch.nn.Module] | None = None

    def lens(self) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
        """(the model's blocks, its final norm): what a layer before the last is read through;
        one line when the model lacks either (checked before any shard is scored)."""
        if self._lens is None:
            n_layers = config_layers(self.model.config)
            if n_layers is None:
                raise InvalidArgumentError(
                    f"{type(self.model).__name__}'s config names no layer count (num_hidden_layers); leave "
                    "--layers out to score its final layer"
                )
            self._lens = (model_blocks(self.model, n_layers), final_norm(self.model))
        return self._lens

    def hidden_states(self, length: int, group: list[Window]) -> tuple[torch.Tensor, torch.Tensor]:
        """The body's final hidden states at every scored position of `group` [n, d] and the
        target ids [n], both on the head's device (what either head ranks; benchmarks compare heads
        on them)."""
        states, targets = self.layer_states(length, group, (None,))
        return states[None], targets

    def layer_states(
        self, length: int, group: list[Window], layers: Sequence[int | None]
    ) -> tuple[dict[int | None, torch.Tensor], torch.Tensor]:
        """{layer: its states at every scored position of `group` [n, d]} from one forward pass,
        a layer before the last already through the final norm, and the target ids [n], on the
        head's device."""
        ids, rows, targets = batch_arrays(group, length, self.pad_id)
        inputs = torch.from_numpy(ids).to(self.device)
        row_index = torch.from_numpy(rows)
        kept: dict[int, torch.Tensor] = {}
        hooks = []
        earlier = [layer for layer in layers if layer is not None]
        if earlier:
            blocks, norm = self.lens()

            def keep(layer: int):
                def hook(_module, _inputs, output):
                    states = output[0] if isinstance(output, tuple) else output
                    flat = states.reshape(-1, states.shape[-1])
                    kept[layer] = flat.index_select(0, row_index.to(flat.device))

                return hook

            hooks = [blocks[layer].register_forward_hook(keep(layer)) for layer in earlier]
        try:
            # use_cache=False: a scoring pass never decodes further, and the KV cache transformers
            # builds by default (config.use_cache) would hold every layer's keys and values.
            hidden = self.model.base_model(input_ids=inputs, use_cache=False).last_hidden_state
        finally:
            for handle in hooks:
                handle.remove()
        head_device = self.head.device
        states: dict[int | None, torch.Tensor] = {}
        for layer in layers:
            if layer is None:
                flat = hidden.reshape(-1, hidden.shape[-1])
                states[None] = flat.index_select(0, row_index.to(flat.device)).to(head_device)
            else:
                on_norm = kept[layer].to(_module_device(norm))
                states[layer] = norm(on_norm).to(head_device)
        return states, torch.from_numpy(targets).to(head_device)

    def score(self, length: int, group: list[Window]) -> tuple[torch.Tensor, ...]:
        """(n_greater, n_equal, nll) of every scored target of `group`, on the head's device."""
        return self.score_layers(length, group, (None,))[None][0]

    def score_layers(
        self, length: int, group: list[Window], layers: Sequence[int | None]
    ) -> dict[int | None, tuple[tuple[torch.Tensor, ...], int]]:
        """{layer: ((n_greater, n_equal, nll) of every scored target of `group`, rows the head
        settled by exact sign)} for every layer of `layers`, from one forward pass."""
        with torch.inference_mode(), pinned_precision():
            states, targets = self.layer_states(length, group, layers)
            out = {}
            for layer, hidden in states.items():
                before = self.head.tally.settled
                try:
                    stats = self.head(hidden, targets)
                except NonFiniteLogitsError as err:
                    raise err.located(scored_position(group, err.row)) from None
                out[layer] = (stats, self.head.tally.settled - before)
            return out


def _module_device(module: torch.nn.Module) -> torch.device:
    tensor = next(module.parameters(), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def default_batch_tokens(device: torch.device | str) -> int:
    """Padded tokens per forward when the settings leave it open: 16,384 on an accelerator (8
    windows of 2,048), 2,048 on a CPU (larger CPU batches measured slower, cache-bound)."""
    return 2_048 if torch.device(device).type == "cpu" else 16_384


def shard_frame(
    plan: Plan,
    scorer: Scorer,
    windows: list[Window],
    batch_tokens: int | None,
    on_tokens: Callable[[int], Any],
) -> pd.DataFrame:
    """Per-token rows of one shard at the plan's layer, sorted by (doc_index, position);
    `on_tokens(n)` after each batch. `batch_tokens` None: `default_batch_tokens` of the scorer's device."""
    return layer_frames(plan, scorer, windows, batch_tokens, on_tokens, (plan.layer,))[plan.layer][0]


def layer_frames(
    plan: Plan,
    scorer: Scorer,
    windows: list[Window],
    batch_tokens: int | None,
    on_tokens: Callable[[int], Any],
    layers: Sequence[int | None],
) -> dict[int | None, tuple[pd.DataFrame, int]]:
    """{layer: (per-token rows of one shard, sorted by (doc_index, position); rows the head settled
    by exact sign)} for every layer of `layers` (None: the final one), one forward pass per batch
    for all of them; `on_tokens(n)` after each batch."""
    parts: list[tuple[list[Window], dict]] = []
    budget = batch_tokens or default_batch_tokens(scorer.device)
    for length, group in batches(windows, budget, plan.policy.context_length):
        parts.append((group, scorer.score_layers(length, group, layers)))
        on_tokens(sum(w.n_scored for w in group))
    groups = [w for group, _ in parts for w in group]
    doc_index = np.concatenate([np.full(w.n_scored, w.doc_index, dtype=np.int32) for w in groups])
    documents = plan.corpus.documents
    doc_ids = [documents[i].id for i in doc_index]
    positions = np.concatenate([w.positions() for w in groups]).astype(np.int32)
    target_ids = np.concatenate([w.input_ids[w.target_rows()] for w in groups]).astype(np.int32)
    frames = {}
    for layer in layers:
        # One device-to-host transfer per shard and layer, not per token.
        greater = torch.cat([p[1][layer][0][0] for p in parts]).cpu().numpy()
        equal = torch.cat([p[1][layer][0][1] for p in parts]).cpu()
        nll = torch.cat([p[1][layer][0][2] for p in parts]).cpu().numpy()
        frame = pd.DataFrame(
            {
                "doc_index": doc_index,
                "doc_id": doc_ids,
                "position": positions,
                "target_id": target_ids,
                "n_greater": greater.astype(np.int32),
                "n_equal": equal.numpy().astype(np.int32),
                "nll": nll.astype(np.float32),
            }
        )
        frame = frame.sort_values(["doc_index", "position"], kind="stable").reset_index(drop=True)
        frames[layer] = (frame, sum(p[1][layer][1] for p in parts))
    return frames


def make_scorer(plan: Plan, weights: torch.nn.Module) -> Scorer:
    """A scorer of `plan`'s runs over loaded `weights` (`rbplab.extraction.weights.load_weights`)."""
    tokenizer = plan.described.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else plan.bos.token_id or 0
    return Scorer(weights, plan.vocab_size, int(pad_id), plan.described.info.softcap, plan.head)


def entry_manifest(
    plan: Plan, shards: list[list[Window]], seconds: float, computed: int, resumed: int
) -> dict:
    """The extractor's part of an entry's manifest: model, corpus, settings, provenance."""
    info = plan.described.info
    # A model spread by a device map runs on GPUs; its info names the map, not a device.
    device = "cuda" if info.device.startswith("device_map:") else info.device
    manifest = {
        # the revision as keyed: a local model's final checkpoint named by step is the model itself
        "model": info.to_dict() | {"revision": plan.spec.model.revision},
        "corpus": {
            "name": plan.corpus.name,
            "content_hash": plan.corpus.content_hash(),
            "n_documents": len(plan.corpus),
            "n_documents_scored": len({w.doc_index for shard in shards for w in shard}),
            "source": plan.corpus.source,
        },
        "settings": {
            "context_length": plan.policy.context_length,
            "stride": plan.policy.stride,
            "bos": plan.policy.bos,
            "bos_decision": plan.bos.to_dict(),
            "include_padded_vocab": plan.include_padded_vocab,
            "max_tokens": plan.max_tokens,
            "dtype": info.dtype,
            "batch_tokens": plan.settings.batch_tokens or default_batch_tokens(device),
            "pad_multiple": PAD_MULTIPLE,
        },
        "vocab_size": plan.vocab_size,
        "provenance": {
            "device": info.device,
            "torch_threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(seconds, 3),
            "tokens_computed": computed,
            "tokens_per_second": round(computed / seconds, 1) if computed and seconds > 0 else None,
            "resumed_shards": resumed,
            # float32 precision pinned while scoring, and the GPU, CUDA and cuBLAS of the process
            # that finalised the entry (None on a CPU); never in the key, so CPU keys stay put
            "numerics": numerics_record(device),
        },
    }
    for path, value in plan.spec.manifest_fields().items():  # what the spec pins, from the spec
        target = manifest
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    training = training_position(plan)
    if training is not None:  # manifest only: cache keys of existing runs stay what they were
        manifest["training"] = training
    return manifest


def training_position(plan: Plan) -> dict | None:
    """Step, tokens seen D and compute C ~= 6 S D of the scored checkpoint, when its checkpoint
    schedule (`rbplab.catalog.registry`: its family's, or its folder's) knows them; None otherwise."""
    model, info = plan.described.model, plan.described.info
    try:
        schedule = model.schedule
    except (OSError, ValueError):
        return None
    return registry.position(schedule, info.revision, info.n_nonembedding)


def producer_id() -> str:
    """Who wrote a shard (host:pid), recorded with it and collected into the manifest."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class ShardWork:
    """What one call of `compute_shards` did: tokens and shards it scored (each shard counted once
    however many layers it was written at; others were present or computed by another process),
    whether it finalised every entry it was given, and where the time went."""

    tokens: int = 0
    shards: int = 0
    finalized: bool = False
    timings: dict[str, float] = field(default_factory=lambda: {"load": 0.0, "score": 0.0, "write": 0.0})


def compute_shards(
    targets: Sequence[tuple[Plan, CacheEntry]],
    indices: Iterable[int],
    *,
    get_scorer: Callable[[Plan], Scorer],
    on_tokens: Callable[[int], object] | None = None,
) -> ShardWork:
    """The shard loop that `extract`, the runner's work units and the CLI share.

    `targets`: one run's plans with their entries, at one layer or several (`plan_layers`): they
    share windows and shards, and every layer a shard lacks is scored from one forward pass per
    batch. Computes each shard of `indices` the entries lack, each under a claim of its own per
    entry so no two processes compute one shard of one entry (a shard another process holds is
    waited for, then checked), and finalises each entry when every shard exists, whoever computed
    them. `get_scorer(plan)` is asked for the scorer at the first shard that needs computing (a
    worker loads weights only then).

    A finished shard is written (at every layer scored) by a writer thread while the next is
    scored (at most one write in flight, so at most two shards' rows per layer are held). Its
    claims are released only once its write has landed, and a failed write is raised here before
    the next shard is handed over.

    A local model's weight files are checked after each shard is scored and before the manifests
    are written (`check_weights`): a shard scored while they changed is not written, and no
    entry is finalised (WeightsChangedError)."""
    started = time.perf_counter()
    plan = targets[0][0]
    shards = plan.shards
    work = ShardWork()
    report = on_tokens or (lambda _n: None)
    producer = producer_id()
    computed = [0] * len(targets)  # rows this call wrote into each target's entry
    written = [0] * len(targets)  # shards this call wrote into each target's entry
    reported: set[int] = set()

    scorer: Scorer | None = None

    def tick(index: int) -> Callable[[int], object]:
        # A shard's tokens are reported once, however many passes over its targets it takes.
        if index in reported:
            return lambda _n: None
        reported.add(index)
        return report

    def score(index: int, mine: list[int]) -> dict[int, tuple[pd.DataFrame, int]] | None:
        nonlocal scorer
        lacking = [t for t in mine if not targets[t][1].has_shard(index)]
        if not lacking:
            tick(index)(sum(w.n_scored for w in shards[index]))
            return None
        if scorer is None:
            clock = time.perf_counter()
            scorer = get_scorer(plan)
            work.timings["load"] += time.perf_counter() - clock
        clock = time.perf_counter()
        layers = [targets[t][0].layer for t in lacking]
        try:
            frames = layer_frames(
                plan, scorer, shards[index], plan.settings.batch_tokens, tick(index), layers
            )
        except NonFiniteLogitsError as err:
            raise err.located(f"shard {index}") from None
        # a model may read its weights from the file while it scores (a memory map): a shard is
        # kept only if the files were not written while it was scored
        check_weights(plan, f"while shard {index} was scored")
        work.timings["score"] += time.perf_counter() - clock
        return {t: frames[targets[t][0].layer] for t in lacking}

    def write(index: int, results: dict[int, tuple[pd.DataFrame, int]]) -> None:  # on the writer thread
        clock = time.perf_counter()
        for t, (frame, settled) in results.items():
            entry = targets[t][1]
            with entry.lock():
                record = {"producer": producer, "head": scorer.head.name, "settled": settled}
                entry.write_shard(index, frame, record)
            computed[t] += len(frame)
            written[t] += 1
        work.timings["write"] += time.perf_counter() - clock
        work.tokens += sum(w.n_scored for w in shards[index])
        work.shards += 1
        _crash_hook()

    with ThreadPoolExecutor(1, thread_name_prefix="rbplab-shard-writer") as writer:
        in_flight: list[tuple[Future, contextlib.ExitStack]] = []

        def land() -> None:
            # Wait for the write in flight (if any), then release its claims; its error is raised.
            while in_flight:
                future, claim = in_flight.pop()
                try:
                    future.result()
                finally:
                    claim.close()

        def run(index: int, which: list[int], wait: bool) -> list[int]:
            """Score shard `index` for the targets of `which` this process can claim; returns
            those another process holds."""
            claim = contextlib.ExitStack()
            held: list[int] = []
            try:
                mine = []
                for t in which:
                    taken = claim.enter_context(targets[t][1].shard_claim(index, wait=wait))
                    (mine if taken else held).append(t)
                if not mine:
                    claim.close()
                    return held
                if in_flight and in_flight[0][0].done():
                    land()  # a failed write stops the loop before more is scored
                results = score(index, mine)
                land()
            except BaseException:
                claim.close()
                raise
            if results is None:
                claim.close()
            else:
                in_flight.append((writer.submit(write, index, results), claim))
            return held

        try:
            every = list(range(len(targets)))
            held_elsewhere = [(index, t) for index in indices for t in run(index, every, wait=False)]
            for index, t in held_elsewhere:  # another process is on it: wait, then make sure it landed
                run(index, [t], wait=True)
        finally:
            land()
    clock = time.perf_counter()
    finalized = []
    for t, (target, entry) in enumerate(targets):
        with entry.lock():
            # the planned count: a shard that vanished since cannot shorten the entry
            if not entry.is_complete() and set(range(len(shards))) <= entry.completed_shards():
                if scorer is not None:  # this process scored: its model still has the keyed weights
                    check_weights(plan, "before the entry's manifest was written")
                seconds = clock - started
                manifest = entry_manifest(target, shards, seconds, computed[t], len(shards) - written[t])
                entry.finalize(manifest, len(shards))
                finalized.append(t)
    work.finalized = len(finalized) == len(targets)
    work.timings["write"] += time.perf_counter() - clock
    return work


def check_weights(plan: Plan, when: str) -> None:
    """WeightsChangedError unless a local model's weight files still hold the bytes the plan's key
    names (stat calls; a file whose stat changed is hashed again)."""
    if plan.described.weights is not None:
        plan.described.weights.check(when)


# Test hook: a process exits hard right after writing its first shard if this names a file that
# does not exist yet (the file is created first, so the retry runs normally).
CRASH_HOOK_ENV = "RBPLAB_TEST_CRASH_AFTER_FIRST_SHARD"


def _crash_hook() -> None:
    marker = os.environ.get(CRASH_HOOK_ENV)
    if marker and not os.path.exists(marker):
        Path(marker).write_text("crashed once\n")
        os._exit(3)


def sound_shards(entry: CacheEntry, shards: list[list[Window]]) -> set[int]:
    """Indices of the shards the entry holds that pass every store check and hold the rows shard
    `shards[i]` gives; every other shard (damaged, beyond the plan, or of another size, as in an
    entry whose counts were found wrong) is removed, so the shard loop recomputes it and the
    manifest it writes counts what the plan gives. Hold `entry.lock()`."""
    done = entry.completed_shards()  # damaged shards are removed here
    wrong = {
        index
        for index in done
        if index >= len(shards) or entry.recorded_rows(index) != sum(w.n_scored for w in shards[index])
    }
    for index in sorted(wrong):
        entry.remove_shard(index)
    return done - wrong
