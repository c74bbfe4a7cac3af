"""What one scored token costs: forward FLOPs and the memory a forward needs on a device.

The cost model, per scored token of a model with S non-embedding parameters whose output head
maps d hidden units to the |V| ranked rows:

- forward FLOPs: 2*S (the body's matrix products) + 2*d*|V| (the head). Attention's own
  products (2 * layers * context * d per token) and padded positions are left out, as in the
  usual 2*N estimate.
- memory on the device: the weights in the run's dtype (+ the float32 copy of the head that
  ranking uses when the run's dtype is not float32 or the head is padded), the activations of one
  batch of `batch_tokens` padded tokens (hidden states and the widest projection of a layer,
  plus the attention matrix of every head as an eager implementation holds it: an upper bound
  where fused kernels do not materialise it), and the head's chunk of float32 logits with its
  work block and the batch's final hidden states in float32 (`rbplab.extraction.ranks`). The fused
  head (`rbplab.extraction.fused_head`) makes no copy and no chunk: it reads the model's own head
  and writes seven 4-byte numbers and 64 band candidates per token, settled in float64 arrays of
  `rbplab.extraction.exact.SETTLE_BYTES`.
- time: FLOPs divided by a FLOP rate (`rbplab.runner.probe`); every other model's time scales
  with its FLOPs per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rbplab.extraction.exact import MAX_CANDIDATES, SETTLE_BYTES
from rbplab.extraction.heads import resolve_head
from rbplab.extraction.plan import Plan
from rbplab.extraction.ranks import block_rows, default_chunk_size
from rbplab.runner.units import BYTES_PER_PARAM

FLOAT32_BYTES = 4


@dataclass(frozen=True)
class Architecture:
    """The shapes the cost model needs, read from a meta-device instance of the config."""

    n_params: int
    S: int
    d: int  # hidden units the head reads (OPT-350m: its word_embed_proj_dim)
    hidden: int  # the body's hidden size
    widest: int  # the widest projection of a layer (the MLP's inner size, or a fused QKV)
    heads: int


def architecture(config: Any) -> Architecture:
    """Shapes of `config`'s causal LM from a meta-device instance (no weights, no memory)."""
    import torch

    from rbplab.catalog.registry import meta_model, parameter_counts

    model = meta_model(config)
    counts = parameter_counts(model)
    head = model.get_output_embeddings()
    d = int(head.weight.shape[1])
    embedding_ids = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters(False)
    }
    widths = [
        max(p.shape)
        for p in model.base_model.parameters()
        if p.ndim == 2 and id(p) not in embedding_ids and p is not head.weight
    ]
    cfg = model.config
    hidden = int(getattr(cfg, "hidden_size", None) or d)
    heads = int(getattr(cfg, "num_attention_heads", None) or 1)
    return Architecture(
        counts.n_params, counts.n_nonembedding, d, hidden, int(max(widths, default=hidden)), heads
    )


def flops_per_token(S: int, d: int, vocab: int) -> int:
    """Forward FLOPs of one scored token: the body's 2*S and the head's 2*d*|V|."""
    return 2 * S + 2 * d * vocab


def memory_needed(
    arch: Architecture,
    *,
    dtype: str,
    vocab: int,
    head_rows: int,
    batch_tokens: int,
    context_length: int,
    device: str,
    head: str,
) -> tuple[int, int, int]:
    """(weights, activations of one batch, head chunk) in bytes on `device` (see the module doc),
    `head` being the resolved head ("fp32" or "fused")."""
    size = BYTES_PER_PARAM[dtype]
    weights = arch.n_params * size
    fp32_head = head != "fused"
    if fp32_head and (dtype != "float32" or vocab != head_rows):  # FloatHead copies the ranked rows
        weights += vocab * arch.d * FLOAT32_BYTES
    length = min(batch_tokens, context_length)
    windows = max(1, batch_tokens // length)
    tokens = windows * length
    activations = tokens * (2 * arch.hidden + arch.widest) * size
    activations += windows * arch.heads * length * length * size
    if not fp32_head:
        # per token: seven 4-byte numbers and MAX_CANDIDATES band candidates; then settling's float64
        # arrays. (A batch whose rows overflow the candidate list also makes the fp32 head's copy,
        # which this leaves out: it is the exception, and gpu_check measures the peak.)
        return weights, activations, (7 + MAX_CANDIDATES) * FLOAT32_BYTES * tokens + SETTLE_BYTES
    rows = default_chunk_size(vocab, device)
    block = min(rows, block_rows(vocab, device))
    head_chunk = FLOAT32_BYTES * (vocab * (rows + block) + rows * arch.d + tokens * arch.d)
    return weights, activations, head_chunk


def plan_costs(
    plan: Plan, arch: Architecture, *, batch_tokens: int, device: str
) -> tuple[int, tuple[int, int, int]]:
    """Forward FLOPs per scored token of `plan`'s model (of architecture `arch`), and the bytes
    `memory_needed` gives for its run on `device` in batches of `batch_tokens` padded tokens, with
    the head `device` resolves (`run_head`)."""
    info = plan.described.info
    per_token = flops_per_token(info.n_nonembedding, arch.d, plan.vocab_size)
    memory = memory_needed(
        arch,
        dtype=info.dtype,
        vocab=plan.vocab_size,
        head_rows=info.head_rows,
        batch_tokens=batch_tokens,
        context_length=plan.policy.context_length,
        device=device,
        head=run_head(plan.settings.head, device, info.dtype),
    )
    return per_token, memory


def run_head(head: str, device: str, dtype: str) -> str:
    """The head a run on `device` resolves (`resolve_head`): a CUDA worker's torch brings Triton,
    so a driver without either plans a GPU worker's head as the worker will resolve it."""
    return resolve_head(head, device, dtype, triton=True if device.startswith("cuda") else None)


def device_memory(device: str) -> tuple[str, int | None]:
    """(description, bytes) of what `device` holds: a GPU's memory, this machine's RAM for a CPU,
    None for a GPU this machine does not have (a cluster's)."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        if not torch.cuda.is_available():
            return "the workers' GPUs (none here)", None
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        return f"cuda:{index} {props.name}", int(props.total_memory)
    import psutil

    return f"{kind} (RAM)", int(psutil.virtual_memory().total)
