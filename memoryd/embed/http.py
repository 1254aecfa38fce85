"""An OpenAI-compatible embeddings endpoint (``POST {url}/embeddings``): a local Ollama, llama.cpp or LM Studio
server. Standard library only; the vectors are normalised here whatever the server does."""

from __future__ import annotations

import json
import math
import struct
import urllib.error
import urllib.request

from memoryd.embed import MAX_TEXT_CHARS, EmbeddingUnavailable

MAX_REPLY_BYTES = 64 * 1024 * 1024  # a reply larger than this is refused, not read into memory


class OpenAICompatible:
    name = "openai-compatible"

    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        if not url or not model:
            raise EmbeddingUnavailable(
                "embedding_endpoint_unset",
                "the openai-compatible provider needs embedding_url and embedding_model",
                "Set embedding_url (e.g. http://127.0.0.1:11434/v1) and embedding_model in settings.yaml.",
            )
        if not url.startswith(("http://", "https://")):
            raise EmbeddingUnavailable(
                "embedding_endpoint_unset", f"embedding_url must be http(s): {url!r}", "Fix embedding_url."
            )
        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.timeout_s = timeout_s
        self.dimension = len(self._call(["dimension probe"])[0]) // 4  # the endpoint says by answering

    def encode(self, texts: list[str], *, query: bool = False) -> list[bytes]:
        return self._call([t[:MAX_TEXT_CHARS] for t in texts]) if texts else []

    def _call(self, texts: list[str]) -> list[bytes]:
        body = json.dumps({"model": self.model, "input": texts}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                raw = reply.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (401, 403, 404, 408, 429):
                raise EmbeddingUnavailable(  # this input: too long for the model, a character it cannot take
                    "embedding_text_refused",
                    f"{self.url}: HTTP {exc.code}",
                    "The text is left to BM25; a changed text is tried again.",
                ) from exc
            raise EmbeddingUnavailable(
                "embedding_endpoint_unreachable",
                f"{self.url}: HTTP {exc.code}",
                "Start the embedding server, or set embedding_provider to use-m3 (bundled).",
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EmbeddingUnavailable(
                "embedding_endpoint_unreachable",
                f"{self.url}: {exc}",
                "Start the embedding server, or set embedding_provider to use-m3 (bundled).",
            ) from exc
        try:
            if len(raw) > MAX_REPLY_BYTES:
                raise ValueError("reply too large")
            data = sorted(json.loads(raw)["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
            if len(vectors) != len(texts) or not vectors[0] or any(len(v) != len(vectors[0]) for v in vectors):
                raise ValueError("wrong number or size of vectors")
            if not all(math.isfinite(x) for v in vectors for x in v):  # JSON's NaN and Infinity parse as floats
                raise ValueError("a vector that is not a number")
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise EmbeddingUnavailable(
                "embedding_endpoint_invalid",
                f"{self.url}: not an embeddings reply ({exc})",
                "Check that embedding_url is an OpenAI-compatible /v1 base and embedding_model exists there.",
            ) from exc
        out = []
        for vector in vectors:
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            out.append(struct.pack(f"<{len(vector)}f", *(x / norm for x in vector)))
        return out
