"""Message streams: a synthetic email-batch generator and a reader for the user's own mail.

The thesis's corpus (2,000 spam + 500 Enron + 500 newsletter messages, 136 batches with 17.7
messages on average and 598 singletons; section 8.4.1) is not public. :func:`synthetic_stream`
imitates it: spam batches are instances of templates drawn from a small stochastic grammar
(sentence slots with alternative phrasings, random names, amounts and URLs, word obfuscation as
in Table 8.1: "mo rtgage"), newsletters are near-identical copies from one sender, and
personal messages are singletons. Batches have varied sizes and arrive in bursts that
interleave in arrival order.

:func:`read_mail` reads a folder of ``.eml`` files or an mbox file (stdlib ``email`` /
``mailbox``) and a batch-id file, so the pipeline runs on real mail.

:func:`batch_windows` cuts a stream into windows of consecutive messages and
:func:`cross_validation_windows` builds the cross-validation of section 8.4.1 (one test batch per
test window; training windows drawn from the other batches).
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import mailbox
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Sequence, Union

import torch
from torch import Tensor

__all__ = [
    "Message",
    "synthetic_stream",
    "read_mail",
    "cluster_labels",
    "batch_windows",
    "cross_validation_windows",
]


@dataclass(frozen=True)
class Message:
    """One email message as the features see it (headers reduced as in section 8.4.1).

    Attributes:
        sender: sender address (``""`` if unknown).
        subject: subject line.
        body: plain-text body.
        mime_type: top-level MIME type (``"text/plain"``, ``"multipart/alternative"``, ...).
        header_size: size of the header block in bytes.
        batch: batch id; ``None`` for a message that belongs to no batch (a singleton).
        time: arrival time (any monotone unit).
        name: where the message came from (file name, mbox key, or a synthetic id).
    """

    sender: str
    subject: str
    body: str
    mime_type: str = "text/plain"
    header_size: int = 0
    batch: Optional[str] = None
    time: float = 0.0
    name: str = ""


def cluster_labels(messages: Sequence[Message]) -> Tensor:
    """Canonical cluster ids of ``messages`` from their ``batch`` (``None``: a singleton).

    Shape:
        Returns (N,) long, numbered by first occurrence.
    """
    ids: dict[str, int] = {}
    out = []
    for i, m in enumerate(messages):
        key = f"\0singleton:{i}" if m.batch is None else m.batch
        if key not in ids:
            ids[key] = len(ids)
        out.append(ids[key])
    return torch.tensor(out, dtype=torch.long)


# ---------------------------------------------------------------------------------- synthetic
_FIRST = ["Terry", "Brenda", "Alex", "Maria", "John", "Linda", "Kevin", "Susan", "Mark", "Nina",
          "Paul", "Grace", "Oscar", "Helen", "Victor", "Diana"]
_LAST = ["Hagan", "Dunn", "Smith", "Lopez", "Brown", "Miller", "Walker", "Young", "King",
         "Baker", "Price", "Reed", "Cole", "Ward"]
_WORDS = (
    "account application approval loan offer rate mortgage credit bank transfer payment "
    "pharmacy pills discount price order shipping online store watch replica deal "
    "investment stock shares profit market growth opportunity winner prize lottery claim "
    "software license download office version cheap save money fast secure verify "
    "password login update confirm information department manager office director service "
    "customer support free trial limited time exclusive member special guaranteed"
).split()
_PERSONAL = (
    "meeting tomorrow lunch project report draft attached schedule call review budget "
    "thanks regards weekend family dinner notes agenda team deadline contract question "
    "answer plan week month trip flight hotel presentation slides numbers forecast "
    "comments feedback proposal client update status minutes quarter analysis data"
).split()
_MIME = ["text/plain", "text/html", "multipart/alternative", "multipart/mixed"]
_TLD = ["com", "net", "biz", "info", "org"]


def _obfuscate(text: str, rng: random.Random, rate: float) -> str:
    words = text.split(" ")
    for i, w in enumerate(words):
        if len(w) > 4 and rng.random() < rate:
            cut = rng.randrange(1, len(w) - 1)
            words[i] = w[:cut] + " " + w[cut:]
    return " ".join(words)


def _sentence(rng: random.Random, vocab: list[str], length: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(length))


class _Template:
    """A spam template: slots of alternative phrasings with placeholders (a tiny grammar)."""

    def __init__(self, rng: random.Random, parent: Optional["_Template"] = None) -> None:
        self.domain = f"{rng.choice(_WORDS)}{rng.choice(_WORDS)}.{rng.choice(_TLD)}"
        self.url = f"http://www.{self.domain}/{rng.choice(_WORDS)}/"
        self.mime = rng.choice(_MIME)
        self.header = rng.randint(300, 900)
        self.subjects = [_sentence(rng, _WORDS, rng.randint(2, 5)) for _ in range(rng.randint(1, 4))]
        self.slots = [
            [_sentence(rng, _WORDS, rng.randint(5, 12)) for _ in range(rng.randint(1, 3))]
            for _ in range(rng.randint(3, 6))
        ]
        self.greetings = rng.sample(["Hello,", "Dear Mr/Mrs,", "Hi,", "Dear customer,", "Greetings,"], 2)
        self.fixed_sender = rng.random() < 0.3
        self.sender = f"{rng.choice(_WORDS)}@{self.domain}"
        if parent is not None:  # a sibling campaign of the same sender: shared slots and site
            self.domain, self.url, self.greetings = parent.domain, parent.url, parent.greetings
            self.sender = parent.sender
            k = min(len(self.slots), len(parent.slots))
            for i in range(k):
                if rng.random() < 0.5:
                    self.slots[i] = parent.slots[i]

    def instantiate(self, rng: random.Random, obfuscation: float) -> tuple[str, str, str, int]:
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        amount = f"${rng.randint(100, 999)}.{rng.randint(0, 999):03d}"
        lines = [rng.choice(self.greetings), f"This is {name}."]
        for slot in self.slots:
            lines.append(rng.choice(slot) + (f" {amount}" if rng.random() < 0.3 else ""))
        lines += [self.url, f"Best Regards, {name}"]
        body = _obfuscate("\n".join(lines), rng, obfuscation)
        sender = self.sender if self.fixed_sender else (
            f"{name.split()[0].lower()}{rng.randint(1, 99)}@{rng.choice(_WORDS)}.{rng.choice(_TLD)}"
        )
        subject = rng.choice(self.subjects)
        if rng.random() < 0.5:
            subject = f"{subject} {rng.choice(_FIRST + _WORDS)}"
        return sender, subject, body, self.header + rng.randint(-40, 40)


def synthetic_stream(
    num_messages: int = 3000,
    singleton_fraction: float = 0.2,
    newsletter_fraction: float = 0.15,
    mean_batch_size: float = 17.7,
    obfuscation: float = 0.05,
    family_rate: float = 0.5,
    seed: int = 0,
) -> list[Message]:
    """A stream of messages in arrival order with batch ids (the thesis corpus's shape).

    Batch sizes are 2 + a geometric number with the given mean; each batch arrives as a burst
    (exponential gaps) starting at a uniform time; singletons arrive uniformly. Defaults
    follow section 8.4.1 (3,000 messages, about 20% singletons, batches of 17.7 on average).

    Args:
        num_messages: total number of messages, >= 1.
        singleton_fraction: share of personal one-off messages, in [0, 1].
        newsletter_fraction: share of messages in newsletter batches, in [0, 1].
        mean_batch_size: mean batch size, >= 2.
        obfuscation: per-word probability of a spurious space in spam (Table 8.1).
        family_rate: probability that a spam template is a sibling of an earlier one (same
            sender, site and greetings, half of its sentence slots shared): distinct batches
            that look alike, the hard negatives of batch detection.
        seed: random seed.

    Returns:
        ``num_messages`` messages sorted by ``time``; ``batch`` is ``None`` for singletons.
    """
    if not isinstance(num_messages, int) or isinstance(num_messages, bool) or num_messages < 1:
        raise ValueError(f"num_messages must be an int >= 1; got {num_messages!r}")
    for name, v in (("singleton_fraction", singleton_fraction), ("newsletter_fraction", newsletter_fraction),
                    ("obfuscation", obfuscation), ("family_rate", family_rate)):
        if not 0 <= v <= 1:
            raise ValueError(f"{name} must be in [0, 1]; got {v!r}")
    if singleton_fraction + newsletter_fraction > 1:
        raise ValueError(
            f"singleton_fraction + newsletter_fraction must be <= 1; got "
            f"{singleton_fraction} + {newsletter_fraction}"
        )
    if not mean_batch_size >= 2:
        raise ValueError(f"mean_batch_size must be >= 2; got {mean_batch_size!r}")
    rng = random.Random(seed)
    horizon = float(num_messages)
    out: list[tuple[float, Message]] = []
    n_single = round(num_messages * singleton_fraction)
    n_news = round(num_messages * newsletter_fraction)
    n_spam = num_messages - n_single - n_news
    p = 1.0 / (mean_batch_size - 1)  # 2 + Geometric(p) - 1 has mean 1 + 1/p

    def sizes(total: int) -> list[int]:
        got: list[int] = []
        while sum(got) < total:
            k = 1
            while rng.random() > p:
                k += 1
            got.append(min(1 + k, total - sum(got)))
        return got

    counter = 0
    templates: list[_Template] = []
    for kind, total in (("spam", n_spam), ("news", n_news)):
        for b, size in enumerate(sizes(total)):
            start = rng.uniform(0, horizon)
            rate = size / rng.uniform(0.02, 0.2) / horizon
            t = start
            if kind == "spam":
                parent = rng.choice(templates) if templates and rng.random() < family_rate else None
                template = _Template(rng, parent)
                templates.append(template)
                make = lambda: template.instantiate(rng, obfuscation)  # noqa: E731
            else:
                domain = f"{rng.choice(_PERSONAL)}news.{rng.choice(_TLD)}"
                text = "\n".join(_sentence(rng, _PERSONAL + _WORDS, rng.randint(8, 15)) for _ in range(8))
                subj = f"{rng.choice(_PERSONAL)} newsletter {rng.randint(1, 52)}"
                header, mime = rng.randint(500, 1500), rng.choice(_MIME[1:])

                def make(text: str = text, subj: str = subj, domain: str = domain,
                         header: int = header) -> tuple[str, str, str, int]:
                    who = f"Dear {rng.choice(_FIRST)},\n"
                    return f"newsletter@{domain}", subj, who + text, header + rng.randint(-5, 5)
            batch_mime = template.mime if kind == "spam" else mime
            for _ in range(size):
                sender, subject, body, header_size = make()
                counter += 1
                out.append((t, Message(sender, subject, body, batch_mime, header_size,
                                       f"{kind}{b}", t, f"msg{counter}")))
                t += rng.expovariate(rate)
    for i in range(n_single):
        t = rng.uniform(0, horizon)
        body = "\n".join(_sentence(rng, _PERSONAL, rng.randint(6, 14)) for _ in range(rng.randint(2, 6)))
        sender = f"{rng.choice(_FIRST).lower()}.{rng.choice(_LAST).lower()}@{rng.choice(_PERSONAL)}.{rng.choice(_TLD)}"
        counter += 1
        out.append((t, Message(sender, _sentence(rng, _PERSONAL, rng.randint(1, 4)), body,
                               "text/plain", rng.randint(300, 1200), None, t, f"msg{counter}")))
    out.sort(key=lambda x: x[0])
    return [m for _, m in out]


# ---------------------------------------------------------------------------------- windows
def batch_windows(
    messages: Sequence[Message], size: int, stride: Optional[int] = None
) -> list[list[Message]]:
    """Windows of ``size`` consecutive messages (the last partial window is dropped).

    Args:
        messages: a stream in arrival order.
        size: window size T, >= 1.
        stride: step between window starts (default: ``size``, non-overlapping).
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"size must be an int >= 1; got {size!r}")
    stride = size if stride is None else stride
    if not isinstance(stride, int) or isinstance(stride, bool) or stride < 1:
        raise ValueError(f"stride must be an int >= 1; got {stride!r}")
    return [list(messages[i : i + size]) for i in range(0, len(messages) - size + 1, stride)]


def cross_validation_windows(
    messages: Sequence[Message],
    size: int = 100,
    num_train: int = 9,
    train_size: Optional[int] = None,
    max_batch_share: int = 50,
    num_tests: Optional[int] = None,
    seed: int = 0,
) -> list[tuple[list[list[Message]], list[Message]]]:
    """The cross-validation of section 8.4.1.

    Each test window holds one test batch (batches larger than ``max_batch_share`` are split
    over several test windows) filled up with randomly drawn other messages to ``size``; its
    ``num_train`` training windows are drawn from the messages outside the test batch. Every
    window keeps arrival order.

    Args:
        messages: a stream with batch ids.
        size: test window size (thesis: 100).
        num_train: training windows per test window (thesis: 9).
        train_size: training window size (default: ``size``).
        max_batch_share: largest part of a batch placed in one test window (thesis: 50).
        num_tests: keep only the first this many test windows (default: all).
        seed: random seed.

    Returns:
        A list of ``(training windows, test window)``.
    """
    if not isinstance(size, int) or size < 2:
        raise ValueError(f"size must be an int >= 2; got {size!r}")
    if not isinstance(num_train, int) or num_train < 1:
        raise ValueError(f"num_train must be an int >= 1; got {num_train!r}")
    train_size = size if train_size is None else train_size
    rng = random.Random(seed)
    order = {id(m): i for i, m in enumerate(messages)}
    batches: dict[str, list[Message]] = {}
    for m in messages:
        if m.batch is not None:
            batches.setdefault(m.batch, []).append(m)
    out = []
    for key in sorted(batches, key=lambda k: order[id(batches[k][0])]):
        members = batches[key]
        if len(members) < 2:
            continue
        rest = [m for m in messages if m.batch != key]
        for i in range(0, len(members), max_batch_share):
            part = members[i : i + max_batch_share]
            fill = rng.sample(rest, min(len(rest), size - len(part)))
            test = sorted(part + fill, key=lambda m: order[id(m)])
            trains = [sorted(rng.sample(rest, min(len(rest), train_size)), key=lambda m: order[id(m)])
                      for _ in range(num_train)]
            out.append((trains, test))
            if num_tests is not None and len(out) >= num_tests:
                return out
    return out


# ---------------------------------------------------------------------------------- real mail
def _body_text(msg: email.message.Message) -> str:
    parts = []
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        if not ctype.startswith("text/"):
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        text = payload.decode(part.get_content_charset() or "utf-8", errors="replace")
        if ctype == "text/html":
            text = re.sub(r"<[^>]+>", " ", text)
        parts.append(text)
    return "\n".join(parts)


def _to_message(msg: email.message.Message, name: str) -> Message:
    header = "".join(f"{k}: {v}\n" for k, v in msg.items())
    sender = email.utils.parseaddr(str(msg.get("From", "")))[1]
    date = msg.get("Date")
    t = float("nan")
    if date:
        try:
            t = email.utils.parsedate_to_datetime(str(date)).timestamp()
        except (TypeError, ValueError, IndexError):
            t = float("nan")
    return Message(sender, str(msg.get("Subject", "")), _body_text(msg), msg.get_content_type(),
                   len(header.encode("utf-8", errors="replace")), None, t, name)


def _read_batch_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(
                f"{path}:{lineno}: expected 2 fields '<message> <batch>' separated by whitespace; "
                f"got {len(fields)}: {line!r}"
            )
        key, batch = fields
        if key in out:
            raise ValueError(f"{path}:{lineno}: message {key!r} is listed twice")
        out[key] = batch
    return out


def read_mail(
    path: Union[str, Path],
    batch_file: Optional[Union[str, Path]] = None,
    unlisted: Literal["error", "singleton"] = "error",
    order: Literal["date", "name"] = "date",
) -> list[Message]:
    """Read ``.eml`` files from a folder, or an mbox file, with optional batch ids.

    The batch file has one line per message, ``<message> <batch>``, where ``<message>`` is the
    ``.eml`` file name (folders), the mbox key (``0``, ``1``, ... in file order) or the
    ``Message-ID`` header, and ``<batch>`` any token. ``-`` as batch marks a singleton. Blank
    lines and lines starting with ``#`` are skipped.

    Args:
        path: a folder of ``*.eml`` files or an mbox file.
        batch_file: the batch-id file (default: no batch ids; every message is a singleton).
        unlisted: what to do with messages the batch file does not list: ``"error"`` or
            ``"singleton"``.
        order: ``"date"`` (the ``Date`` header; messages without one go last, by name) or
            ``"name"`` (file name / mbox order).

    Returns:
        Messages in arrival order with ``batch`` set.

    Raises:
        FileNotFoundError: if ``path`` or ``batch_file`` does not exist.
        ValueError: on a malformed batch file (with file and line), an unknown key in it, or an
            unlisted message when ``unlisted="error"``.
    """
    if unlisted not in ("error", "singleton"):
        raise ValueError(f"unlisted must be 'error' or 'singleton'; got {unlisted!r}")
    if order not in ("date", "name"):
        raise ValueError(f"order must be 'date' or 'name'; got {order!r}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such mail folder or mbox file: {path}")
    items: list[tuple[str, Message, str]] = []  # (key, message, message-id)
    if path.is_dir():
        files = sorted(path.glob("*.eml"))
        if not files:
            raise ValueError(f"{path} holds no *.eml files")
        for f in files:
            msg = email.message_from_bytes(f.read_bytes(), policy=email.policy.compat32)
            items.append((f.name, _to_message(msg, f.name), str(msg.get("Message-ID", "")).strip()))
    else:
        box = mailbox.mbox(str(path), create=False)
        for i, key in enumerate(box.keys()):
            msg = box[key]
            items.append((str(i), _to_message(msg, f"{path.name}:{i}"), str(msg.get("Message-ID", "")).strip()))
        box.close()
    batches: dict[str, str] = {}
    if batch_file is not None:
        bpath = Path(batch_file)
        if not bpath.exists():
            raise FileNotFoundError(f"no such batch file: {bpath}")
        batches = _read_batch_file(bpath)
        known = {k for k, _, _ in items} | {mid for _, _, mid in items if mid}
        unknown = sorted(set(batches) - known)
        if unknown:
            raise ValueError(f"{bpath}: {len(unknown)} listed message(s) not found in {path}: {unknown[:5]}")
    out = []
    for key, m, mid in items:
        batch = batches.get(key, batches.get(mid)) if batch_file is not None else "-"
        if batch is None:
            if unlisted == "error":
                raise ValueError(
                    f"message {key!r} of {path} is not listed in the batch file {batch_file} "
                    f"(pass unlisted='singleton' to treat it as a singleton)"
                )
            batch = "-"
        out.append(Message(m.sender, m.subject, m.body, m.mime_type, m.header_size,
                           None if batch == "-" else batch, m.time, m.name))
    if order == "date":
        out.sort(key=lambda m: (m.time != m.time, m.time if m.time == m.time else 0.0, m.name))
    return out
