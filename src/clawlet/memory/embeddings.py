"""An OpenAI-compatible embeddings client (``POST {OPENAI_BASE_URL}/embeddings``)."""

from __future__ import annotations

BATCH_SIZE = 64


class EmbeddingError(RuntimeError):
    pass


class EmbeddingClient:
    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float = 30.0) -> None:
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout

    def embed(self, texts: list[str]) -> list[list[float]]:
        import httpx  # (with its command line's rich and pygments): not at server start, see clawlet.cli

        vectors: list[list[float]] = []
        with httpx.Client(timeout=self.timeout, trust_env=False) as client:
            for start in range(0, len(texts), BATCH_SIZE):
                batch = texts[start : start + BATCH_SIZE]
                try:
                    response = client.post(
                        self.url, json={"model": self.model, "input": batch}, headers=self.headers
                    )
                    response.raise_for_status()
                    data = sorted(response.json()["data"], key=lambda item: item["index"])
                except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
                    raise EmbeddingError(f"embedding request failed: {exc}") from exc
                vectors += [[float(x) for x in item["embedding"]] for item in data]
        if len(vectors) != len(texts):
            raise EmbeddingError("the embedding endpoint returned the wrong number of vectors")
        return vectors
