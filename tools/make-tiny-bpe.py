#!/usr/bin/env python3
"""Writes data/tests/fixtures/tiny-bpe.json: a Hugging Face tokenizer.json small enough to ship
in the repository, for the tests of `swax prepare --tokenizer PATH`. It is GPT-2's layout (a
byte-level BPE: every byte has a token, so any text encodes) with 256 byte tokens, MERGES merges
learnt here from TEXT, and `<|endoftext|>` as an added special token, the last id. Plain Python,
no library: the learning is the textbook BPE loop, which is all a fixture needs."""
import json
import re
import sys
from collections import Counter
from pathlib import Path

MERGES = 120
TEXT = """Once upon a time there was a little girl who lived in a village near the forest.
Whenever she went out, the little girl wore a red riding cloak, so everyone in the village
called her Little Red Riding Hood. One morning she asked her mother if she could go to visit
her grandmother, as it had been a while since they had seen each other. The quick brown fox
jumps over the lazy dog. 0123456789 The end of the story is the start of another one."""


def byte_char(b):
    """GPT-2's byte-to-character table, as swax's export writes it (hybrid/src/export)."""
    printable = lambda c: 0x21 <= c <= 0x7E or 0xA1 <= c <= 0xAC or 0xAE <= c <= 0xFF
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for c in range(b) if not printable(c)))


def main(out):
    # GPT-2's split, for the ASCII of TEXT: merges never cross these pieces.
    pieces = re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", TEXT)
    words = Counter(tuple(byte_char(b) for b in p.encode()) for p in pieces)
    vocab = {byte_char(b): b for b in range(256)}
    merges = []
    while len(merges) < MERGES:
        pairs = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
        merged = Counter()
        for word, n in words.items():
            out_word, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b):
                    out_word.append(a + b)
                    i += 2
                else:
                    out_word.append(word[i])
                    i += 1
            merged[tuple(out_word)] += n
        words = merged
    eot = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    Path(out).write_text(json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/tests/fixtures/tiny-bpe.json")
