"""Tokenise a chat so that only the chat template's own markers become special tokens.

Rendering the template and tokenising the whole prompt with special-token parsing on (what
llama-cpp-python's ``create_chat_completion`` does) lets a user who types ``<|im_end|>`` then
``<|im_start|>assistant`` inside one message open real turns of their own: the model then sees a
conversation the gateway's rules (multi-turn routing, never caching multi-turn answers) never saw.

So the prompt is rendered with a unique placeholder in place of each message's content, split on the
placeholders, and tokenised piece by piece: the template's text with special-token parsing (its
``<|im_start|>`` is one control token), each content as plain text (a typed ``<|im_start|>`` becomes
the ordinary tokens of those characters). The render is then checked against the template's own
render of the real contents, so a template that transforms contents (``| trim``) is followed
exactly; one that does more than that is refused rather than tokenised unsafely.

For byte-level BPE vocabularies (SmolLM2, Qwen, Llama 3) a benign chat gives exactly the ids of
whole-prompt tokenisation, because their pre-tokeniser splits at the places the pieces meet (tested
with the embedded model). SentencePiece vocabularies that add a space prefix may differ at a piece's
start, as they do after every special token.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

Formatter = Callable[..., Any]


class TemplateError(ValueError):
    """The chat template does something with message contents that cannot be tokenised safely."""


def _render(formatter: Formatter, messages: Sequence[dict[str, str]]) -> str:
    return formatter(messages=list(messages)).prompt


def _pieces(formatter: Formatter, messages: Sequence[dict[str, str]]) -> list[tuple[str, bool]]:
    """The rendered prompt as ``(text, is_template)`` pieces, in order."""
    nonce = secrets.token_hex(8)
    marks = [f"\ue000{nonce}:{i}\ue001" for i in range(len(messages))]
    # An empty content keeps its real value: templates may test for it, and it has nothing to tokenise.
    placeheld = [{**m, "content": marks[i] if m.get("content") else ""} for i, m in enumerate(messages)]
    rendered = _render(formatter, placeheld)
    pattern = re.compile("\ue000" + nonce + r":(\d+)\ue001")
    real = _render(formatter, messages)
    for transform in (lambda s: s, str.strip):
        contents = [transform(m.get("content") or "") for m in messages]
        pieces: list[tuple[str, bool]] = []
        cursor = 0
        for match in pattern.finditer(rendered):
            pieces.append((rendered[cursor:match.start()], True))
            pieces.append((contents[int(match.group(1))], False))
            cursor = match.end()
        pieces.append((rendered[cursor:], True))
        if "".join(text for text, _ in pieces) == real:
            return [(text, template) for text, template in pieces if text]
    raise TemplateError("the chat template changes message contents in a way the edge runner cannot "
                        "tokenise safely; set [edge] model_path to a model with a plain chat template")


def _tokenize(llama: Any, text: bytes, add_bos: bool, special: bool) -> list[int]:
    """``Llama.tokenize`` without its per-call output array of ``n_ctx_train`` tokens (8192 here).

    That allocation, not the tokenising, was most of a short piece's cost, and a chat is tokenised
    in several pieces. A piece never has more tokens than bytes, plus a BOS and a space prefix.
    """
    from models import llama_runtime

    lib = llama_runtime.lib()
    vocab = llama_runtime.vocab_if_any(llama)
    if vocab is None:
        return list(llama.tokenize(text, add_bos=add_bos, special=special))
    size = len(text) + 2
    out = (lib.llama_token * size)()
    n = lib.llama_tokenize(vocab, text, len(text), out, size, add_bos, special)
    if n < 0:  # cannot happen by the bound above; llama.cpp says how many it needs
        size = -n
        out = (lib.llama_token * size)()
        n = lib.llama_tokenize(vocab, text, len(text), out, size, add_bos, special)
        if n < 0:
            raise RuntimeError(f"llama.cpp could not tokenise a {len(text)}-byte piece")
    return out[:n]


def tokenize_chat(llama: Any, messages: Sequence[dict[str, str]], formatter: Formatter,
                  add_bos: bool = False) -> list[int]:
    """The prompt's token ids: template text with special tokens, message contents as plain text.

    ``llama`` is a ``llama_cpp.Llama``; ``formatter`` a llama-cpp-python chat formatter (called as
    ``formatter(messages=...)`` returning an object with ``.prompt``), e.g. ``Jinja2ChatFormatter``
    over the GGUF's template. ``add_bos`` as in ``Llama.tokenize`` (templates usually render their BOS).
    """
    tokens: list[int] = []
    for i, (text, template) in enumerate(_pieces(formatter, messages)):
        tokens += _tokenize(llama, text.encode("utf-8"), add_bos and i == 0, template)
    return tokens


__all__ = ["TemplateError", "tokenize_chat"]
