"""The Markdown memory domain: daily format, chunking, text processing for the index, the notes service."""
