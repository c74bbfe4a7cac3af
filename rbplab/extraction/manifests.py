"""An entry's manifest as the extractor writes it: model, corpus, settings, provenance, and the
scored checkpoint's place in training (manifest only: never in a cache key)."""

from __future__ import annotations

from datetime import datetime, timezone

import torch

from rbplab.catalog import schedules
from rbplab.extraction.plan import Plan
from rbplab.extraction.precision import numerics_record
from rbplab.extraction.scoring import PAD_MULTIPLE, default_batch_tokens
from rbplab.extraction.windows import Window


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
    schedule (`rbplab.catalog.schedules`: its family's, or its folder's) knows them; None otherwise."""
    model, info = plan.described.model, plan.described.info
    try:
        schedule = model.schedule
    except (OSError, ValueError):
        return None
    return schedules.position(schedule, info.revision, info.n_nonembedding)
