"""rbplab: measure and explore the Relative-Based Scaling Law of language models."""

from rbplab.stats import TokenStats

__all__ = ["TokenStats"]
__version__ = "0.1.0"
