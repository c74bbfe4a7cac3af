"""Every stored column of a cache entry's rows, for tests of the shard format itself (the package
reads entries as TokenStats only: `CacheEntry.read_stats`)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.store.cache.entry import CacheEntry


def entry_rows(entry: CacheEntry) -> pd.DataFrame:
    """All per-token rows of a complete entry in shard order, each shard through `read_shard`'s
    checks (a missing or damaged shard raises as a read of the entry does)."""
    shards = range(len(entry.manifest()["shards"]))
    frames = [pq.read_table(pa.BufferReader(entry.read_shard(i))).to_pandas() for i in shards]
    return pd.concat(frames, ignore_index=True)
