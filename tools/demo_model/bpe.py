"""Byte-level BPE with the Qwen2 pre-tokenizer: a trainer and an encoder that gives the ids
llama.cpp and Strata give for a GGUF with tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre =
"qwen2" (pre-tokenize with the regex below, map bytes to GPT-2's printable characters, then
apply merges lowest rank first). Special tokens are matched in the text before pre-tokenizing.

Vocabulary layout: ids 0..255 are the 256 single bytes (in byte order), then one token per merge
in merge order, then the special tokens.
"""
import collections

import regex

# Qwen2's pre-tokenizer (tokenizer.json of Qwen2/Qwen3); include/strata/tokenizer/pre_tokenizer.hpp
# holds the same expression in the form llama.cpp runs it.
QWEN2_PATTERN = regex.compile(
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHAR = bytes_to_unicode()


def split_specials(text):
    """Yields (is_special, piece)."""
    pattern = regex.compile("(" + "|".join(regex.escape(s) for s in SPECIALS) + ")")
    for i, piece in enumerate(pattern.split(text)):
        if piece:
            yield i % 2 == 1, piece


def pre_tokenize(text):
    return [("".join(BYTE_CHAR[b] for b in w.encode("utf-8"))) for w in QWEN2_PATTERN.findall(text)]


def train(texts, vocab_size, log=print):
    """Returns the merges [(left, right)] for a vocabulary of vocab_size tokens (bytes + merges +
    specials). Ties in pair frequency break on the pair's text, so the result is deterministic."""
    n_merges = vocab_size - 256 - len(SPECIALS)
    counts = collections.Counter()
    for t in texts:
        for special, piece in split_specials(t):
            if not special:
                counts.update(pre_tokenize(piece))
    words = [list(w) for w in counts]
    freq = list(counts.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[a, b] += freq[i]
            where[a, b].add(i)
    merges = []
    while len(merges) < n_merges and pairs:
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for i in list(where[best]):
            w = words[i]
            j, out = 0, []
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            for a, b in zip(w, w[1:]):
                pairs[a, b] -= freq[i]
                if pairs[a, b] <= 0:
                    del pairs[a, b]
                where[a, b].discard(i)
            for a, b in zip(out, out[1:]):
                pairs[a, b] += freq[i]
                where[a, b].add(i)
            words[i] = out
        if len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges")
    if len(merges) < n_merges:
        raise ValueError(f"bpe: corpus supports only {len(merges)} merges, {n_merges} requested")
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.tokens = [BYTE_CHAR[b] for b in range(256)] + [a + b for a, b in self.merges] + SPECIALS
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        if len(self.ids) != len(self.tokens):
            raise ValueError("bpe: duplicate token text (two merges give the same string)")
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self.cache = {}

    def special_id(self, name):
        return self.ids[name]

    def _word(self, w):
        ids = self.cache.get(w)
        if ids is None:
            parts = list(w)
            while len(parts) > 1:
                ranked = [(self.rank.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))]
                r, k = min(ranked)
                if r == 1 << 30:
                    break
                pair = self.merges[r]
                out, j = [], 0
                while j < len(parts):
                    if j + 1 < len(parts) and (parts[j], parts[j + 1]) == pair:
                        out.append(pair[0] + pair[1])
                        j += 2
                    else:
                        out.append(parts[j])
                        j += 1
                parts = out
            ids = [self.ids[p] for p in parts]
            self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for special, piece in split_specials(text):
            if special:
                out.append(self.ids[piece])
            else:
                for w in pre_tokenize(piece):
                    out.extend(self._word(w))
        return out

    def decode(self, ids):
        inv = {c: b for b, c in BYTE_CHAR.items()}
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            out += t.encode() if t in SPECIALS else bytes(inv[c] for c in t)
        return out.decode("utf-8", "replace")
