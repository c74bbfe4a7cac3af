"""Sharing cache entries: `export_entries` writes complete, verified entries into one tar file;
`import_archive` brings them into a cache.

An archive is untrusted input: its members are checked from their headers before a byte is copied
(`members`), unpacked into a locked temporary folder of the cache root (`staging`), verified entry
by entry with every rule of the cache, and installed all or none (`install`); `importing` runs
these steps, `export` writes archives.
"""
