"""memoryd: local, auditable, per-project memory for coding agents."""

__version__ = "0.1.0"
