"""Evaluation corpora: documents with stable ids, from bundled files, local files or the hub.

`corpus` holds the types and their cache keys, `files`, `bundled` and `hub_datasets` read each
source, and `loading` opens a corpus as the user names it (bundled name, ``hub:<name>[@revision]``
or path), checks and lists them.
"""
