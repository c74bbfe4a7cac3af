"""The content-addressed cache of per-token rank statistics.

`layout` (keys, file names, size bounds), `rule` (what a rule is and how rules judge),
`entry_rules`, `summary_rules` and `index_rules` (the rules of an entry's files, its summary and
its index row), `rules` (all of them as one table), `index` (the cache's index of pooled
statistics), `reading` (an entry as a reader sees it, its summary file included), `entry`
(`CacheEntry`: lock, claims, writes, finalization), `admin` (listing and removal). What the cache
guarantees is in docs/cache.md ("What the cache guarantees").
"""
