"""Prompt sources: the pinned corpus shipped here, and synthetic prompts of exact token lengths.

Every prompt starts with a unique tag (``[m-c4-17] ``) so no two requests share a prefix beyond
the first characters: a prefix cache cannot serve one request from another (a trap of vLLM's
warm-up, which repeats the first prompt). Exact lengths use the server's own tokenizer over
HTTP: vLLM's ``/tokenize`` and ``/detokenize`` or llama-cpp-python's ``/extras/tokenize`` and
``/extras/detokenize``; the count includes the BOS token the server adds, i.e. it is what the
model is fed.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import httpx

from socketlab.errors import SocketlabError
from socketlab.serve.loadgen import Prompt

CORPUS = Path(__file__).with_name("corpus.txt")
#: the corpus is pinned: prompts (and so results) change only when this hash does
CORPUS_SHA256 = "8467a1ae9c46f28d3d89ee168a39eee3aae785bef027d2f4f85965c8f857b08b"


class PromptError(SocketlabError):
    """Prompts of the requested shape cannot be made (no tokenizer endpoint, odd lengths)."""


def corpus_words() -> list[str]:
    data = CORPUS.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CORPUS_SHA256:
        raise PromptError(
            f"{CORPUS}: sha256 {digest[:12]} is not the pinned {CORPUS_SHA256[:12]}; "
            "the corpus was edited, so results would not be comparable"
        )
    return data.decode().split()


def corpus_prompts(count: int, words: int, seed: int, tag: str) -> list[Prompt]:
    """``count`` prompts of ``words`` corpus words each, from seeded offsets."""
    pool = corpus_words()
    rng = random.Random(f"{seed}/{tag}")
    out = []
    for i in range(count):
        start = rng.randrange(len(pool))
        body = [pool[(start + k) % len(pool)] for k in range(max(words, 1))]
        out.append(Prompt(f"{tag}-{i}", f"[{tag}-{i}] " + " ".join(body)))
    return out


class ServerTokenizer:
    """The server's tokenizer over HTTP (vLLM or llama-cpp-python routes, found on first use)."""

    ROUTES = (  # (tokenize path, its text field, detokenize path)
        ("/tokenize", "prompt", "/detokenize"),
        ("/extras/tokenize", "input", "/extras/detokenize"),
    )

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float = 30.0):
        self.base = base_url.rstrip("/")
        self.model = model
        self.client = httpx.Client(timeout=timeout_s, trust_env=False)
        self.route: tuple[str, str, str] | None = None

    def close(self) -> None:
        self.client.close()

    def _post(self, path: str, body: dict) -> dict:
        if self.model:
            body = {**body, "model": self.model}
        r = self.client.post(self.base + path, json=body)
        r.raise_for_status()
        return r.json()

    def tokenize(self, text: str) -> list[int]:
        routes = [self.route] if self.route else list(self.ROUTES)
        errors = []
        for route in routes:
            try:
                out = self._post(route[0], {route[1]: text})
            except httpx.HTTPError as exc:
                errors.append(f"{route[0]}: {type(exc).__name__} {str(exc)[:60]}")
                continue
            self.route = route
            return [int(t) for t in out["tokens"]]
        raise PromptError(
            f"{self.base}: no tokenizer endpoint answered ({'; '.join(errors)}); "
            "synthetic prompts need one, or use prompts.source 'corpus'"
        )

    def detokenize(self, tokens: list[int]) -> str:
        if not self.route:
            self.tokenize("x")
        out = self._post(self.route[2], {"tokens": tokens})
        return out.get("text", out.get("prompt", ""))


def exact_prompt(tok: ServerTokenizer, prefix: str, filler: str, n_tokens: int) -> str:
    """``prefix`` plus filler text cut so that the server counts exactly ``n_tokens``."""
    specials = len(tok.tokenize(""))  # BOS and the like, added to every prompt
    base = tok.tokenize(prefix)
    need = n_tokens - len(base)
    if need < 0:
        raise PromptError(f"input length {n_tokens} is shorter than the prompt tag {prefix!r}")
    ids = tok.tokenize(filler)[specials:]
    while len(ids) < need + 8:
        ids += ids or [0]
    take = need
    for _ in range(12):  # token boundaries can merge across the cut: adjust and re-check
        text = prefix + tok.detokenize(ids[:take]) if take > 0 else prefix
        count = len(tok.tokenize(text))
        if count == n_tokens:
            return text
        take = max(take + (n_tokens - count), 0)
    raise PromptError(
        f"could not make a prompt of exactly {n_tokens} tokens with this tokenizer (got {count})"
    )


def synthetic_prompts(
    tok: ServerTokenizer, count: int, n_tokens: int, seed: int, tag: str
) -> list[Prompt]:
    filler = " ".join(corpus_words())
    out = []
    for p in corpus_prompts(count, 16, seed, tag):
        body = p.text.split("] ", 1)[1] + " " + filler
        text = exact_prompt(tok, p.text.split("] ", 1)[0] + "]", body, n_tokens)
        out.append(Prompt(p.id, text, n_tokens))
    return out
