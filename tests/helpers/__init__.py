"""Test helpers importable from every test folder: `from helpers.models import ...`."""
