"""The package's version: package.json's, written here by scripts/sync-version.mjs."""

__version__ = "0.1.0"
