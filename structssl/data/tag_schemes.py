"""Tag schemes of sequence labelling files: detection and conversion to and from BIO.

structssl trains every span-tagging model on **BIO** tags (``O``, ``B-X`` begins a span of type
``X``, ``I-X`` continues it), whatever the scheme of the user's file, and writes predictions
back in the file's own scheme. The conversions are exact for well-formed tag sequences, so a
file read and written back is unchanged.

==========  =================================================================================
scheme      tags
==========  =================================================================================
``bio``     ``O``, ``B-X`` (every span's first token), ``I-X`` (the others); also "IOB2"
``iob1``    ``O``, ``I-X`` (span tokens), ``B-X`` only on the first token of a span that
            directly follows another span of the same type (CoNLL-2003's original files)
``bioes``   ``O``, ``B-X``, ``I-X``, ``E-X`` (last token), ``S-X`` (single-token span)
``bilou``   the same with ``U-X`` for single and ``L-X`` for last tokens
``io``      ``O`` and entity types without prefixes (``PER``, ``person-actor``): a span is a
            run of tokens of one type (two adjacent spans of one type merge: the scheme cannot
            tell them apart), as in Stanford NER's training files and Few-NERD; given, never
            detected (``tag_scheme="io"``)
``plain``   any tag strings without span structure (part-of-speech tags, ...): no conversion,
            token accuracy only
==========  =================================================================================

:func:`detect_scheme` picks the scheme of a file's tags: ``plain`` unless every tag other than
``O`` has a one-letter prefix and a type (``B-PER``); then ``bioes`` / ``bilou`` when ``E``/``S``
or ``L``/``U`` prefixes occur, else ``iob1`` when more spans start with ``I-`` than with
``B-``, else ``bio``. A file of span tags with a few others (a typo ``PER`` or ``b-LOC`` among
``B-PER`` / ``I-LOC``: :func:`stray_tags`) is not read as ``plain``: reading it as a training file
fails at the first such tag, and ``tag_scheme="plain"`` reads it so on purpose. Ill-formed
input (in BIO a span that starts with ``I-X``) is read the way conlleval reads it: as the start
of a span (:func:`ill_formed` finds it; reading a training file warns with the count and the
first line).
"""

from __future__ import annotations

import re
from typing import Iterable, Literal, Optional
from typing import Sequence as Seq

__all__ = [
    "SCHEMES",
    "Scheme",
    "detect_scheme",
    "stray_tags",
    "check_tag",
    "to_bio",
    "from_bio",
    "ill_formed",
    "bio_tag_set",
    "entity_types",
]

Scheme = Literal["bio", "iob1", "bioes", "bilou", "io", "plain"]
#: the tag schemes (:func:`detect_scheme` picks among them all but ``io``)
SCHEMES: tuple[str, ...] = ("bio", "iob1", "bioes", "bilou", "io", "plain")

_PREFIXES = {"bio": "BI", "iob1": "BI", "bioes": "BIES", "bilou": "BILU"}
_PREFIXED = re.compile(r"^([A-Z])-(.+)$")


def _split(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``."""
    if tag == "O":
        return "O", ""
    match = _PREFIXED.match(tag)
    if match is None:
        return "", tag
    return match.group(1), match.group(2)


def check_tag(tag: str, scheme: str) -> Optional[str]:
    """Why ``tag`` is not a tag of ``scheme`` (a message), or ``None`` when it is one."""
    if scheme == "plain" or tag == "O":
        return None
    prefix, kind = _split(tag)
    if scheme == "io":
        if prefix:
            return (f"expected an IO tag (O, or an entity type without a prefix); got {tag!r} "
                    "(a span tag: leave tag_scheme to detection)")
        return None
    allowed = _PREFIXES[scheme]
    if prefix and prefix in allowed and kind:
        return None
    shown = ", ".join(f"{p}-X" for p in allowed)
    return f"expected a {scheme.upper()} tag (O, {shown}); got {tag!r}"


def detect_scheme(tag_sequences: Iterable[Seq[str]]) -> str:
    """The scheme of a corpus's tags (see the module docstring).

    Args:
        tag_sequences: the tags of each sentence.

    Returns:
        One of :data:`SCHEMES`.
    """
    prefixes: set[str] = set()
    starts_b = starts_i = 0
    for tags in tag_sequences:
        previous = "O"
        for tag in tags:
            prefix, kind = _split(tag)
            if prefix == "":
                return "plain"
            prefixes.add(prefix)
            if prefix in ("B", "I"):
                prev_prefix, prev_kind = _split(previous)
                continues = prev_prefix != "O" and prev_kind == kind
                if prefix == "B" and not continues:
                    starts_b += 1  # BIO begins spans with B-; IOB1 only after the same type
                elif prefix == "I" and not continues:
                    starts_i += 1  # IOB1 begins spans with I-
            previous = tag
    prefixes.discard("O")
    if not prefixes:
        return "bio"
    if not prefixes <= set("BIESLU"):
        return "plain"
    if prefixes & set("ES") and not prefixes & set("LU"):
        return "bioes"
    if prefixes & set("LU") and not prefixes & set("ES"):
        return "bilou"
    if prefixes & set("ESLU"):
        return "plain"
    return "iob1" if starts_i > starts_b else "bio"


def stray_tags(tag_sequences: Seq[Seq[str]], share: float = 0.05) -> list[tuple[int, int]]:
    """The tags that make an otherwise span-tagged corpus read as ``plain``: typos such as
    ``PER`` or ``b-LOC`` among ``O`` / ``B-PER`` / ``I-LOC`` tags.

    Args:
        tag_sequences: the tags of each sentence.
        share: at most this many stray tags per span tag (``B-X``, ``I-X``, ``E-X``, ``S-X``,
            ``L-X``, ``U-X``) count as strays; more make a plain tag set (part-of-speech tags
            with a few ``B-``-like ones are not flagged).

    Returns:
        ``(sentence, position)`` of every tag that is neither ``O`` nor a span tag, in file
        order, when the corpus has span tags and at most ``share`` as many others; else ``[]``.
    """
    stray: list[tuple[int, int]] = []
    spans = 0
    for i, tags in enumerate(tag_sequences):
        for t, tag in enumerate(tags):
            prefix, kind = _split(tag)
            if prefix == "O":
                continue
            if prefix and prefix in "BIESLU" and kind:
                spans += 1
            else:
                stray.append((i, t))
    return stray if spans and len(stray) <= share * spans else []


def to_bio(tags: Seq[str], scheme: str) -> list[str]:
    """One sentence's tags converted from ``scheme`` to well-formed BIO (``plain`` is returned
    as is). An ``I-X`` (``E-X``, ``L-X``) that does not continue a span of type ``X`` starts
    one, as conlleval reads it (:func:`ill_formed` finds such sequences)."""
    if scheme == "plain":
        return list(tags)
    out: list[str] = []
    previous = ("O", "")
    for tag in tags:
        prefix, kind = ("O", "") if tag == "O" else ("I", tag) if scheme == "io" else _split(tag)
        if prefix == "O":
            out.append("O")
        else:
            begins = prefix in ("B", "S", "U") if scheme != "iob1" else prefix == "B"
            begins = begins or previous[0] == "O" or previous[1] != kind
            out.append(f"{'B' if begins else 'I'}-{kind}")
        previous = (prefix, kind)
    return out


def ill_formed(tags: Seq[str], scheme: str) -> Optional[int]:
    """The position of the first tag of ``tags`` that is not well formed in ``scheme`` (e.g.
    BIO ``I-X`` after ``O``, BIOES ``I-X`` after ``E-X``, IOB1 ``B-X`` after ``O``), or
    ``None``: the first place where converting to BIO and back does not give ``tags``."""
    if scheme == "plain":
        return None
    back = from_bio(to_bio(tags, scheme), scheme)
    return next((i for i, (a, b) in enumerate(zip(tags, back)) if a != b), None)


def from_bio(tags: Seq[str], scheme: str) -> list[str]:
    """One sentence's BIO tags converted to ``scheme`` (``plain`` is returned as is).

    An ``I-X`` that does not continue a span of type ``X`` starts one (as conlleval reads it).
    """
    if scheme in ("bio", "plain"):
        return list(tags)
    if scheme == "io":
        return [tag if tag == "O" else _split(tag)[1] for tag in tags]
    spans: list[tuple[str, bool, bool]] = []  # (type, first of its span, last of its span)
    n = len(tags)
    parsed = [_split(t) for t in tags]
    for t, (prefix, kind) in enumerate(parsed):
        if prefix == "O":
            spans.append(("", False, False))
            continue
        prev_prefix, prev_kind = parsed[t - 1] if t else ("O", "")
        first = prefix == "B" or prev_prefix == "O" or prev_kind != kind
        nxt_prefix, nxt_kind = parsed[t + 1] if t + 1 < n else ("O", "")
        last = nxt_prefix != "I" or nxt_kind != kind
        spans.append((kind, first, last))
    out: list[str] = []
    for t, (kind, first, last) in enumerate(spans):
        if not kind:
            out.append("O")
        elif scheme == "iob1":
            prev_kind = spans[t - 1][0] if t else ""
            out.append(f"{'B' if first and prev_kind == kind else 'I'}-{kind}")
        else:
            single, end = ("S", "E") if scheme == "bioes" else ("U", "L")
            prefix = single if first and last else "B" if first else end if last else "I"
            out.append(f"{prefix}-{kind}")
    return out


def entity_types(tags: Iterable[str]) -> list[str]:
    """The span types ``X`` of prefixed tags, sorted (``O`` and plain tags are skipped)."""
    return sorted({kind for prefix, kind in map(_split, tags) if prefix not in ("O", "")})


def bio_tag_set(types: Iterable[str]) -> tuple[str, ...]:
    """The BIO tag vocabulary of span types: ``O``, then ``B-X``, ``I-X`` per type in order.

    Example:
        >>> bio_tag_set(["LOC", "PER"])
        ('O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER')
    """
    out = ["O"]
    for kind in types:
        out += [f"B-{kind}", f"I-{kind}"]
    return tuple(out)
