"""The per-token implementations of RBP histograms, document statistics and emergence as they were
before studies were built from entry summaries (rbplab at dc63314, copied unchanged except for
their imports). Tests compare the summary-based analysis with these, never with itself."""
