"""Shared plumbing of the verifiable rewards: completion text, column alignment, malformed-completion accounting (one
completion after another, or in threads: `safe_scores(..., workers=)`), `fold_case` (case-insensitive searches at the
speed of literal ones, for the linear-time parsing of issue #25), and the Unicode normalisation of issue #39
(`normalize_text` before answers are read, `skeleton` before hedge words and option letters are). `clean_text` does
not normalise: the code reward runs programs as written."""

from __future__ import annotations

import logging
import re
import string
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence

from healtrl.toy.tasks import completion_text

logger = logging.getLogger("healtrl.rewards")

MAX_COMPLETION_CHARS = 1_000_000
"""Completions longer than this (characters) are malformed: they score 0 without being parsed."""

# Every character that a case-insensitive regex matches to an ASCII letter -> that letter in lower case: A-Z and
# U+0130, U+0131 (i), U+017F (s), U+212A (k). A lower-case pattern matches the folded text where its case-insensitive
# version matches the text, at the same indices (one character for one). Case-insensitive patterns cannot use the
# regex engine's fast search for a literal prefix; on 1M characters they take ~0.1 s where the literal takes ~1 ms.
_FOLD = str.maketrans(
    {**{c: c.lower() for c in string.ascii_uppercase}, "\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
)


def fold_case(text: str) -> str:
    """`text` with the characters a case-insensitive regex matches to ASCII letters replaced by those letters in
    lower case; same length, same indices. (An ASCII text is its `str.lower()`, ~20x faster than the translation.)"""
    return text.lower() if text.isascii() else text.translate(_FOLD)


# ----------------------------------------------------------------------------------------------------------------------
# Unicode normalisation of completion text (issue #39): `normalize_text` before reading answers, `skeleton` before
# reading hedge words and option letters.
# ----------------------------------------------------------------------------------------------------------------------

# Line breaks other than "\n" (`str.splitlines` splits on all of them): each becomes "\n" ("\r\n" one "\n").
_LINE_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# Removed: zero-width and other invisible format characters (soft hyphen, combining grapheme joiner, Arabic letter
# mark, Hangul fillers, Mongolian vowel separators, zero-width space / non-joiner / joiner, LRM / RLM, bidi embeddings
# and isolates, word joiner and the invisible operators, BOM, interlinear annotation, tag characters), variation
# selectors, and the generic combining diacritical marks ("mayb\u0301e" is "maybe"; removed before NFKC, so a
# decomposed "e\u0301" reads as "e", and after it, where it decomposed "¨" into a space and a mark). Script-specific
# marks (Devanagari vowel signs...) are kept.
_INVISIBLE_RANGES = [
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0xE0000, 0xE007F), (0xE0100, 0xE01EF),
    (0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F),
]  # fmt: skip
_INVISIBLE_RE = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _INVISIBLE_RANGES) + "]")
# Superscripts and subscripts, read before NFKC (which would make "x²" the different answer "x2"): a run of them is
# a braced exponent or index, "x²³" -> "x^{23}", "a₁₀" -> "a_{10}" (so it reaches the cost pre-check as a power).
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ"
_SUBSCRIPTS = "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎"
_SCRIPTS_RE = re.compile(f"[{_SUPERSCRIPTS}{_SUBSCRIPTS}]")
# A superscript becomes "\ue000" digit "\ue001" (subscripts: "\ue002" ... "\ue003"); the markers between two of a run
# are dropped and the rest become "^{" / "_{" and "}": str.replace passes only (a substitution per run is ~1 µs).
_SCRIPT_MARKED = [(c, "\ue000" + p + "\ue001") for c, p in zip(_SUPERSCRIPTS, "0123456789+-=()ni")] + [
    (c, "\ue002" + p + "\ue003") for c, p in zip(_SUBSCRIPTS, "0123456789+-=()")
]
_SCRIPT_MARKERS = [("\ue001\ue000", ""), ("\ue003\ue002", ""), ("\ue000", "^{"), ("\ue002", "_{"), ("\ue001", "}")]
_SCRIPT_MARKERS += [("\ue003", "}")]
_NFKC_CHUNK = 20_000
"""NFKC runs on chunks of this many characters and stops once its output passes `MAX_COMPLETION_CHARS` (one
character can expand to 18, U+FDFA: 1M of them would take seconds)."""


def _drop(text: str, pattern: re.Pattern, ranges) -> str:
    """`text` without the characters of `pattern` (a character class of the code point `ranges`): a regex
    substitution for short texts, a numpy mask for long ones (a substitution per character is ~0.3 µs)."""
    if len(text) < 10_000:
        return pattern.sub("", text)
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    bounds = np.array([v for a, b in sorted(ranges) for v in (a, b + 1)], dtype=np.uint32)
    inside = np.searchsorted(bounds, codes, side="right") % 2 == 1
    return codes[~inside].tobytes().decode("utf-32-le")


def _nfkc(text: str) -> str | None:
    """NFKC of `text`, None when it is longer than `MAX_COMPLETION_CHARS` (checked after each chunk). Chunks end
    before an ASCII character (where nothing composes across) when one is within 1,000 characters of the nominal end,
    else at it (a composition across that boundary, in a 1,000-character run of non-ASCII text, is not made)."""
    out, size, start = [], 0, 0
    while start < len(text):
        end = start + _NFKC_CHUNK
        if end < len(text):
            ascii_at = _ASCII_RE.search(text, end, end + 1_000)
            end = ascii_at.start() if ascii_at else end
        out.append(unicodedata.normalize("NFKC", text[start:end]))
        size += len(out[-1])
        if size > MAX_COMPLETION_CHARS:
            return None
        start = end
    return "".join(out)


_ASCII_RE = re.compile("[\x00-\x7f]")


def normalize_text(text: str) -> str | None:
    """`text` as the rewards read it, None (malformed) when it is longer than `MAX_COMPLETION_CHARS` once
    normalised.

    Every line break ("\r\n", "\r", "\v", "\f", U+001C-U+001E, U+0085, U+2028, U+2029) is a "\n"; superscript and
    subscript runs are written `^{...}` / `_{...}` (before NFKC, which would make "x²" the different answer "x2";
    so "x²³" is "x^{23}" and reaches the cost pre-check as a power); Unicode NFKC (fullwidth `Ａ` and `４` are `A` and
    `4`, mathematical bold letters and ligatures are letters, no-break and other spaces are spaces, `½` is `1/2`: the
    fraction slash U+2044 is read as "/"); the invisible characters of `_INVISIBLE_RANGES` (zero-width, soft hyphen,
    bidi controls, variation selectors, generic combining marks) removed. Confusable letters are kept (`skeleton` maps
    them, for hedge words and option letters only).

    Linear, in C and numpy: an ASCII text only has its line breaks rewritten (~1 ms on 1M characters); other texts
    take str.replace passes, NFKC in chunks and one numpy pass (~0.1 s on 1M hostile characters)."""
    text = text.replace("\r\n", "\n") if "\r" in text else text
    for char in _LINE_BREAKS if not text.isascii() else _LINE_BREAKS[:6]:
        if char in text:
            text = text.replace(char, "\n")
    if text.isascii():
        return text
    if _SCRIPTS_RE.search(text):
        for char, marked in _SCRIPT_MARKED:
            if char in text:
                text = text.replace(char, marked)
        for marker, replacement in _SCRIPT_MARKERS:
            text = text.replace(marker, replacement)
        if len(text) > MAX_COMPLETION_CHARS:
            return None
    if _INVISIBLE_RE.search(text):
        text = _drop(text, _INVISIBLE_RE, _INVISIBLE_RANGES)
        if text.isascii():
            return text
    text = _nfkc(text)
    if text is None:
        return None
    if _INVISIBLE_RE.search(text):  # after NFKC: it composes what it can, and decomposes some characters ("¨")
        text = _drop(text, _INVISIBLE_RE, _INVISIBLE_RANGES)
    return text.replace("\u2044", "/") if "\u2044" in text else text


# Confusable letters -> the ASCII letter they look like (a small explicit table; Unicode's confusables.txt has
# thousands of entries, these are the ones that pass for Latin letters in ordinary fonts): Cyrillic, Greek, a few IPA
# letters; then every Latin letter named after an ASCII letter in the Latin blocks (`_LATIN_LOOKALIKE_BLOCKS`: accented
# and hooked letters, small capitals "ᴏʀ" -> "OR", modifier letters, the phonetic extensions, Latin Extended-C/D/E),
# and the accented Latin letters of U+00C0-U+024F (their base letter, "é" -> "e"); and the Latin clicks that pass for
# punctuation (ǀ ǁ -> "|", ǃ -> "!").
_CONFUSABLES = {
    # Cyrillic capitals and small letters
    **dict(zip("АВСЕНІЈКМОРЅТХУЬ", "ABCEHIJKMOPSTXYb")),
    **dict(zip("авсеһіјкмопрѕтхуьԁԛԝүӏɡ", "abcehijkmonpstxybdqwylg")),
    # Greek capitals and the small letters that pass for Latin ones
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧϜ", "ABEZHIKMNOPTYXF")),
    **dict(zip("αβγεικνορτυχϲϳ", "abyeiknoptuxcj")),
    # IPA / Latin extended / Lisu
    **dict(zip("ɑɩıȷꓲ", "aiijI")),
    **dict(zip("ǀǁǃ", "||!")),
}
_LATIN_LOOKALIKE_BLOCKS = [(0x00C0, 0x02FF), (0x1D00, 0x1DBF), (0x1E00, 0x1EFF), (0x2C60, 0x2C7F), (0xA720, 0xA7FF)]
_LATIN_LOOKALIKE_BLOCKS += [(0xAB30, 0xAB6F)]
# "LATIN SMALL LETTER O WITH STROKE" -> "o", "LATIN LETTER SMALL CAPITAL R" -> "R", "MODIFIER LETTER CAPITAL A" -> "A"
# (a small capital is its capital: case-insensitive rules read it as the letter, option letters as the option).
_LATIN_NAME_RE = re.compile(
    r"(?:LATIN|MODIFIER) (?:SMALL |CAPITAL )?LETTER (?:SMALL )?(?:CAPITAL )?([A-Z])(?: WITH .+)?"
)
for _low, _high in _LATIN_LOOKALIKE_BLOCKS:
    for _code in range(_low, _high + 1):
        _name = unicodedata.name(chr(_code), "")
        _named = _LATIN_NAME_RE.fullmatch(_name)
        if _named and chr(_code) not in _CONFUSABLES:
            _small = "SMALL " in _name and "SMALL CAPITAL" not in _name
            _CONFUSABLES[chr(_code)] = _named.group(1).lower() if _small else _named.group(1)
for _code in range(0xC0, 0x250):
    _base = unicodedata.normalize("NFKD", chr(_code))[0]
    if _base.isascii() and _base.isalpha() and chr(_code) not in _CONFUSABLES:
        _CONFUSABLES[chr(_code)] = _base
_SKELETON = str.maketrans(_CONFUSABLES)
_SKELETON_CODES = None  # numpy lookup table over the BMP, built on first use


def skeleton(text: str) -> str:
    """`text` (already `normalize_text`-ed) with its confusable letters replaced by the ASCII letters they look like
    (`_CONFUSABLES`: Cyrillic `о`, Greek `ο` and `ö` are all `o`; the small capitals "ᴏʀ" are "OR"; hooked, dotted
    and modifier Latin letters are their base letter; the clicks ǀ ǁ are "|"): where hedge words ("mаybe" with a
    Cyrillic `а`), answer heads ("Аnswer:") and option letters (a Cyrillic `А`) are read. One character for one:
    same length, same indices, so a match in the skeleton slices the text. Not used for the answers themselves (a Greek
    `ν` stays `ν` there). Linear: ASCII texts are returned as they are, others mapped by str.translate (short) or a
    numpy table (long; ~10 ms on 1M)."""
    global _SKELETON_CODES
    if text.isascii():
        return text
    if len(text) < 10_000:
        return text.translate(_SKELETON)
    import numpy as np

    if _SKELETON_CODES is None:
        table = np.arange(0x10000, dtype=np.uint32)
        for char, letter in _CONFUSABLES.items():
            table[ord(char)] = ord(letter)
        _SKELETON_CODES = table
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    mapped = np.where(codes < 0x10000, _SKELETON_CODES[np.minimum(codes, 0xFFFF)], codes)
    return mapped.astype(np.uint32).tobytes().decode("utf-32-le")


_lock = threading.Lock()
_MALFORMED: Counter = Counter()


def malformed_counts() -> dict[str, int]:
    """Malformed completions seen so far in this process, per reward name (empty, too long, invalid unicode, wrong
    type, unreadable ground truth)."""
    with _lock:
        return dict(_MALFORMED)


def reset_malformed_counts() -> None:
    """Set every malformed-completion counter back to zero."""
    with _lock:
        _MALFORMED.clear()


def clean_text(completion) -> str | None:
    """The text of a completion (string or conversation), or None when it is malformed.

    Malformed: not a string or a conversation with text content, empty or only whitespace, longer than
    `MAX_COMPLETION_CHARS`, or not encodable as UTF-8 (lone surrogates).
    """
    try:
        text = completion_text(completion)
    except Exception:
        return None
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_COMPLETION_CHARS:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def column(values, n: int, name: str) -> list:
    """A dataset column as TRL passes it (a list aligned with the completions), broadcast from a scalar if needed.

    Raises:
        ValueError: the list does not have one value per completion (a bug in the caller, not a malformed completion).
    """
    if values is None or isinstance(values, (str, bytes, int, float)):
        return [values] * n
    try:
        values = list(values)
    except TypeError:
        return [values] * n
    if len(values) != n:
        raise ValueError(
            f"The reward got {n} completions but {len(values)} values of the column '{name}'; TRL passes one value "
            "per completion. Pass the dataset column aligned with `completions`."
        )
    return values


def report(name: str, n_malformed: int, n_total: int, log_metric: Callable | None) -> None:
    """Count malformed completions of one batch and log the count (through TRL's `log_metric` when given)."""
    if n_malformed:
        with _lock:
            _MALFORMED[name] += n_malformed
            total = _MALFORMED[name]
    if callable(log_metric):
        try:
            log_metric(f"rewards/{name}/malformed", float(n_malformed))
            return
        except Exception:  # a logging hook must not take the reward down
            pass
    if n_malformed:
        logger.warning(
            "Reward '%s': %d of %d completions were malformed and scored 0 (%d so far).",
            name,
            n_malformed,
            n_total,
            total,
        )


def safe_scores(
    name: str, completions: Sequence, score: Callable[[int, str], float], log_metric=None, workers: int = 1
) -> list[float]:
    """Score each completion with `score(index, text)`; malformed completions and any exception score 0.0 and are
    counted. With `workers` > 1 the completions are scored by that many threads at once (for scores that wait on
    other processes, as math-verify's workers); the scores keep the completions' order."""
    completions = list(completions) if completions is not None else []
    texts = [clean_text(completion) for completion in completions]

    def one(i: int) -> float | None:
        if texts[i] is None:
            return None
        try:
            value = score(i, texts[i])
        except Exception as exc:  # never raise on a completion
            logger.debug("Reward '%s' failed on completion %d: %r", name, i, exc)
            return None
        return None if value is None else float(value)

    if workers > 1 and len(completions) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(completions)), thread_name_prefix=f"reward-{name}") as pool:
            values = list(pool.map(one, range(len(completions))))
    else:
        values = [one(i) for i in range(len(completions))]
    rewards = [0.0 if value is None else value for value in values]
    report(name, sum(value is None for value in values), len(completions), log_metric)
    return rewards
