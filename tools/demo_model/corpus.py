"""Builds the demo model's corpus from text that Debian packages ship (see deps.txt):
King James Bible (bible-kjv, read through the `bible` program), Webster 1913 / GCIDE
(dict-gcide), The Devil's Dictionary (dict-devil) and the Jargon File (jargon-text).

Items are verses and dictionary entries. Each is rendered two ways: as a ChatML conversation
("Recite Genesis 1:1" -> the verse, "What does lamb mean?" -> the definition) and as plain text
lines. A fixed 2% of items (by a hash of their key) is held out of training entirely; the
plain-text rendering of the held-out items is heldout.txt, the file perplexity is measured on.
Everything is deterministic: the same packages give the same bytes.
"""
import gzip
import hashlib
import random
import re
import subprocess
import unicodedata

SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are Strata's demo model. Answer briefly.", "Be terse."]
# Passages every demo asks for: always in training, and repeated (as well-known text is in any corpus).
FAMOUS = {"Genesis 1": range(1, 6), "Psalms 23": range(1, 7), "John 1": range(1, 6), "John 3": [16],
          "Matthew 6": range(9, 14), "Exodus 20": [3], "Ecclesiastes 3": range(1, 9),
          "1 Corinthians 13": range(4, 9)}
FAMOUS_REPEAT = 24  # 6 gave verse-shaped nonsense for "Recite Genesis 1:1." (1.3M training tokens)
HELDOUT_PERCENT = 2

POS_NAMES = {"n.": "noun", "v. t.": "verb", "v. i.": "verb", "v.": "verb", "a.": "adjective",
             "adj.": "adjective", "adv.": "adverb", "prep.": "preposition", "conj.": "conjunction",
             "interj.": "interjection", "pron.": "pronoun", "p. p.": "participle", "p. a.": "adjective",
             "n. pl.": "plural noun", "v. t. & i.": "verb"}


def ascii_text(s):
    s = s.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    s = s.replace("\u2014", "--").replace("\u2013", "-")
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode()


def squash(s):
    return re.sub(r"\s+", " ", s).strip()


def is_heldout(key):
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100 < HELDOUT_PERCENT


# ---------------------------------------------------------------- King James Bible
def read_bible():
    """[(book, chapter, verse, text)] in canonical order, from `bible -l0 Gen1:1-Rev22:21`."""
    out = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    verses, book, chapter = [], None, None
    for line in out.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m and book:
            verses.append((book, chapter, int(m.group(1)), squash(m.group(2))))
            continue
        m = re.match(r"^(.*\S) (\d+)$", line.strip())
        if not m:
            raise ValueError(f"bible output: unexpected line {line!r}")
        book, chapter = m.group(1), int(m.group(2))
    if len(verses) != 31102:
        raise ValueError(f"bible: expected the 31102 verses of the KJV, got {len(verses)}")
    return verses


def ref(book, chapter, verse):
    return f"{book} {chapter}:{verse}"


def is_famous(book, chapter, verse):
    return verse in FAMOUS.get(f"{book} {chapter}", ())


# ---------------------------------------------------------------- dictd databases
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64num(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v


def read_dictd(name):
    """[(headword, entry text)] from /usr/share/dictd/NAME.{index,dict.dz}, first entry per headword."""
    data = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read()
    seen, out = set(), []
    for line in open(f"/usr/share/dictd/{name}.index", encoding="utf-8"):
        word, off, size = line.rstrip("\n").split("\t")[:3]
        if word.startswith("00") or word.lower() in seen:
            continue
        seen.add(word.lower())
        out.append((word, data[b64num(off):b64num(off) + b64num(size)].decode("utf-8", "replace")))
    return out


ENTITY = re.compile(r"\[([=^.~\"'`]?)([a-z]{1,4})\]")


def gcide_entity(m):
    letters = m.group(2)
    if letters in ("aum", "eum", "ium", "oum", "uum", "cced", "ntil"):
        return letters[0]
    return "" if letters in ("root", "deg", "prime", "sect") else letters


def parse_gcide(word, text):
    """(headword, part of speech, [senses]) or None when the entry has no clean definition."""
    if not re.fullmatch(r"[A-Za-z][a-z]+", word):
        return None
    text = ENTITY.sub(gcide_entity, text)
    while True:  # etymologies and labels: [ ... ] (nested after entity removal: none)
        t = re.sub(r"\[[^\[\]]*\]", "", text)
        if t == text:
            break
        text = t
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not paras:
        return None
    head = paras[0]
    m = re.search(r"\\[^\\]*\\(?:\s*\([^)]*\))?,?\s*((?:[a-z]{1,6}\.\s?){1,3}(?:& [a-z]\.)?)", head)
    pos = POS_NAMES.get(m.group(1).strip()) if m else None
    if not pos:
        return None
    senses = []
    first = head[m.end():]
    for p in [first] + paras[1:]:
        if re.match(r"\s{8,}", p) or p.strip().startswith(("Note:", "Syn.", "{", "--")):
            continue
        p = re.sub(r"--[A-Z][^\n]*", "", p)
        p = squash(p.replace("{", "").replace("}", ""))
        p = re.sub(r"^\d+\.\s*", "", p)
        p = re.sub(r"^\(([^)]*)\)\s*", "", p)  # subject label, e.g. (Zool.)
        if len(p) < 8 or not re.search(r"[a-z]", p) or p.startswith("Syn"):
            continue
        senses.append(p.rstrip(" ;,"))
        if len(senses) == 2:
            break
    if not senses:
        return None
    return word.lower(), pos, [ascii_text(s) for s in senses]


def parse_devil(word, text):
    m = re.match(r"([A-Z][A-Z' -]*),\s*([a-z. ]+\.)\s+(.*)", text, re.S)
    if not m:
        return None
    body = re.split(r"\n\s*\n", m.group(3))[0]
    pos = POS_NAMES.get(squash(m.group(2)), "noun")
    return m.group(1).strip().lower(), pos, ascii_text(squash(body))


def read_jargon():
    """[(term, first paragraph of the entry)] from the Jargon File's plain-text edition."""
    text = ascii_text(gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz").read().decode("utf-8"))
    out = []
    for m in re.finditer(r"\n   :([^:\n]+): ([^\n]*)\n\n(.*?)(?=\n   :[^:\n]+: |\Z)", text, re.S):
        term = squash(m.group(1))
        paras = [squash(p) for p in re.split(r"\n\s*\n", m.group(3)) if p.strip()]
        paras = [re.sub(r"^\d+\.\s*", "", p).replace("{", "").replace("}", "") for p in paras]
        body = next((p for p in paras if len(p) > 20), None)
        if body and len(term) < 40:
            out.append((term, body))
    return out


def clip(s, n):
    if len(s) <= n:
        return s
    cut = s[:n].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "..."


# ---------------------------------------------------------------- rendering
def chatml(turns, system=None, think=False):
    """turns: [(question, answer)]. `think` pre-fills the empty block Qwen3's template writes for
    enable_thinking=false (so `strata-run --no-think` prompts are in-distribution too)."""
    s = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    for q, a in turns:
        s += f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
        s += ("<think>\n\n</think>\n\n" if think else "") + f"{a}<|im_end|>\n"
    return s


def definition_text(word, pos, senses):
    if len(senses) == 1:
        return f"{word.capitalize()} ({pos}): {senses[0]}"
    return f"{word.capitalize()} ({pos}): " + " ".join(f"{i + 1}. {s}" for i, s in enumerate(senses))


def build(seed=1234):
    """Returns (train_documents, heldout_plain_text, stats). Documents are strings that may hold
    the special tokens <|im_start|> / <|im_end|>; the trainer separates them with <|endoftext|>."""
    rng = random.Random(seed)
    verses = read_bible()
    gcide = [e for e in (parse_gcide(w, t) for w, t in read_dictd("gcide")) if e]
    devil = [e for e in (parse_devil(w, t) for w, t in read_dictd("devil")) if e]
    jargon = read_jargon()

    chat_items, plain_items, heldout = [], [], []  # chat_items: (source, [(q, a)])

    # Bible: every training verse once as a chat turn and once in a plain chapter run.
    bible_words = {}
    chapter_runs = {}
    for book, ch, v, text in verses:
        key = ref(book, ch, v)
        line = f"{key} {text}"
        if is_heldout(key) and not is_famous(book, ch, v):
            heldout.append(("bible", f"{book} {ch}", line))
            continue
        for w in re.findall(r"[a-z]+", text.lower()):
            bible_words[w] = bible_words.get(w, 0) + 1
        chapter_runs.setdefault(f"{book} {ch}", []).append(line)
        book_q = "Psalm" if book == "Psalms" and rng.random() < 0.5 else book
        q = rng.choice(["Recite {}.", "Recite {}", "What does {} say?", "Quote {}."]).format(f"{book_q} {ch}:{v}")
        chat_items.append(("bible", [(q, text)]))
        if is_famous(book, ch, v):
            for _ in range(FAMOUS_REPEAT):
                chat_items.append(("bible", [(f"Recite {key}.", text)]))
    for name, lines in chapter_runs.items():
        for i in range(0, len(lines), 12):
            plain_items.append(("bible", "\n".join(lines[i:i + 12])))
    # Famous passages as ranges, e.g. "Recite Psalms 23:1-6".
    by_ref = {ref(b, c, v): t for b, c, v, t in verses}
    for chap, vs in FAMOUS.items():
        vs = list(vs)
        if len(vs) > 1:
            text = " ".join(by_ref[f"{chap}:{v}"] for v in vs)
            for _ in range(FAMOUS_REPEAT):
                chat_items.append(("bible", [(f"Recite {chap}:{vs[0]}-{vs[-1]}.", text)]))

    # Webster/GCIDE: words of the Bible and the other sources first, then the rest at random.
    questions = ["What does {} mean?", "What does {} mean?", "Define {}.", "What is the meaning of {}?",
                 "What does the word {} mean?"]
    known = set(bible_words) | {w for w, _, _ in devil}
    common = [e for e in gcide if e[0] in known]
    rare = [e for e in gcide if e[0] not in known]
    rng.shuffle(rare)
    picked = common + rare[:max(0, 16000 - len(common))]
    for word, pos, senses in picked:
        answer = clip(definition_text(word, pos, senses), 360)
        if is_heldout("gcide:" + word):
            heldout.append(("gcide", word[0], answer))
            continue
        chat_items.append(("gcide", [(rng.choice(questions).format(word), answer)]))
        plain_items.append(("gcide", answer))

    for word, pos, body in devil:
        answer = clip(f"{word.capitalize()} ({pos}): {body}", 420)
        if is_heldout("devil:" + word):
            heldout.append(("devil", word[0], answer))
            continue
        for q in (f"What is {word}, according to the Devil's Dictionary?", f"Define {word} cynically."):
            chat_items.append(("devil", [(q, answer)]))

    for term, body in jargon:
        answer = clip(f"{term}: {body}", 420)
        if is_heldout("jargon:" + term.lower()):
            heldout.append(("jargon", term[0].lower(), answer))
            continue
        chat_items.append(("jargon", [(rng.choice([f"What is {term} in hacker jargon?",
                                                   f"What does {term} mean in the Jargon File?"]), answer)]))
        plain_items.append(("jargon", answer))

    # Conversations: 15% get a second turn from the same source, 10% a system prompt, 10% the
    # empty think block.
    rng.shuffle(chat_items)
    docs, i = [], 0
    while i < len(chat_items):
        src, turns = chat_items[i]
        i += 1
        if rng.random() < 0.15 and i < len(chat_items) and chat_items[i][0] == src:
            turns = turns + chat_items[i][1]
            i += 1
        system = rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.10 else None
        docs.append(chatml(turns, system, think=rng.random() < 0.10))
    # Plain text: dictionary lines grouped in runs of 8 like a page; Bible runs as they are.
    groups = {}
    for src, text in plain_items:
        groups.setdefault(src, []).append(text)
    for src, items in groups.items():
        if src == "bible":
            docs.extend(items)
        else:
            rng.shuffle(items)
            docs.extend("\n".join(items[j:j + 8]) for j in range(0, len(items), 8))
    rng.shuffle(docs)

    # Held-out plain text, grouped as training renders it (Bible by chapter, dictionaries in runs).
    heldout_text = "\n".join(line for _, _, line in heldout) + "\n"
    stats = {"verses": len(verses), "gcide_entries": len(gcide), "gcide_used": len(picked),
             "devil_entries": len(devil), "jargon_entries": len(jargon), "heldout_items": len(heldout),
             "train_documents": len(docs)}
    return docs, heldout_text, stats


if __name__ == "__main__":
    import json
    docs, held, stats = build()
    print(json.dumps(stats, indent=1))
    print(sum(map(len, docs)) / 1e6, "MB train;", len(held) / 1e6, "MB held out")
    for d in docs[:6]:
        print("----\n" + d)
    print("==== held out\n" + held[:1500])
