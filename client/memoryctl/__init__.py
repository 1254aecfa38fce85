"""memoryctl: the thin, standard-library-only client of memoryd."""

__version__ = "0.1.0"
