"""The content-addressed cache of per-token rank statistics.

`layout` (keys, file names, size bounds), `rules` (every rule an entry is checked by, as one
table: its files, shards, manifest and summary), `reading` (an entry as a reader sees it, its
summary file included), `entry` (`CacheEntry`: lock, claims, writes, finalization), `admin`
(listing and removal). What the cache guarantees is in docs/cache.md ("What the cache guarantees").
"""
