"""Text processing that notes, rules and the index share: chunking (one fence/heading reader), segmentation and
query terms, passages. Pure functions over text: no I/O, no settings, nothing above it."""
