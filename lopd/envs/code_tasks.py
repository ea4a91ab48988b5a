"""Generated Python function-writing tasks for training (the ``code-train`` suite).

Each template draws its parameters from a seeded ``random.Random`` and returns a function name,
a plain-language specification, a reference solution (source) and test inputs. Expected
outputs are computed by running the trusted reference in-process at generation time and kept
as plain data (``calls`` and ``expected``, tagged by ``lopd.envs.plaindata``): the sandbox
receives only the inputs, and the parent compares what the candidate returned with
``expected``. The same tests in assert form (``tests``) are kept for reading; they stay hidden
from the model, which only sees the specification and one worked example. 29 templates x up to 10 distinct parameter draws = 253 tasks,
deterministic.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

from lopd.envs.plaindata import encode

Spec = tuple[str, str, str, list[tuple[Any, ...]]]  # name, doc, solution source, inputs

_WORDS = ["apple", "kiwi", "banana", "fig", "cherry", "date", "grape", "lemon", "mango", "pear",
          "plum", "melon", "olive", "peach", "lime", "berry"]


def _ints(rng: random.Random, n: int, lo: int = -20, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _lists(rng, lo=-20, hi=50):
    return [(_ints(rng, rng.randint(1, 9), lo, hi),) for _ in range(6)] + [([],)]


def t_count_chars(rng):
    chars = "".join(sorted(rng.sample("aeiouxyzrstln", rng.randint(2, 5))))
    src = f"def count_chars(s):\n    return sum(1 for c in s if c in {chars!r})\n"
    doc = f"Return how many characters of the string `s` are one of the characters in {chars!r}."
    return "count_chars", doc, src, [(_text(rng, rng.randint(0, 5)),) for _ in range(7)]


def t_sum_multiples(rng):
    a, b = rng.sample(range(2, 10), 2)
    src = (f"def sum_multiples(n):\n    return sum(i for i in range(n) "
           f"if i % {a} == 0 or i % {b} == 0)\n")
    doc = f"Return the sum of all non-negative integers below `n` divisible by {a} or by {b}."
    return "sum_multiples", doc, src, [(rng.randint(0, 200),) for _ in range(7)]


def t_rotate(rng):
    k, side = rng.randint(1, 6), rng.choice(["left", "right"])
    shift = f"{k} % len(items)" if side == "left" else f"-{k} % len(items)"
    src = (f"def rotate(items):\n    if not items:\n        return []\n"
           f"    k = {shift}\n    return items[k:] + items[:k]\n")
    doc = (f"Return a new list with the elements of `items` rotated {side} by {k} positions "
           f"(wrapping around; an empty list stays empty).")
    return "rotate", doc, src, _lists(rng)


def t_caesar(rng):
    k = rng.randint(1, 25)
    src = (f"def caesar(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) "
           f"if 'a' <= c <= 'z' else c for c in s)\n")
    doc = (f"Shift every lowercase letter of `s` forward by {k} places in the alphabet, wrapping "
           f"from 'z' to 'a'; leave all other characters unchanged.")
    return "caesar", doc, src, [(_text(rng, rng.randint(0, 4)) + rng.choice(["", "!", " Ok"]),)
                                for _ in range(7)]


def t_clip_values(rng):
    lo = rng.randint(-10, 5)
    hi = lo + rng.randint(3, 30)
    src = f"def clip_values(nums):\n    return [min(max(x, {lo}), {hi}) for x in nums]\n"
    doc = f"Return a list where each number of `nums` is clamped to the range [{lo}, {hi}]."
    return "clip_values", doc, src, _lists(rng)


def t_every_nth(rng):
    n, offset = rng.randint(2, 5), rng.randint(0, 2)
    src = f"def every_nth(items):\n    return items[{offset}::{n}]\n"
    doc = (f"Return the elements of `items` at positions {offset}, {offset + n}, "
           f"{offset + 2 * n}, ... (0-based), in order.")
    return "every_nth", doc, src, _lists(rng)


def t_long_words(rng):
    length = rng.randint(3, 6)
    op, what = rng.choice([(">=", "at least"), ("<=", "at most"), ("==", "exactly")])
    src = (f"def long_words(sentence):\n"
           f"    return [w for w in sentence.split() if len(w) {op} {length}]\n")
    doc = (f"Split `sentence` on whitespace and return the words that have {what} {length} "
           f"characters, in their original order.")
    return "long_words", doc, src, [(_text(rng, rng.randint(0, 7)),) for _ in range(7)]


def t_fizz_words(rng):
    a, b = rng.sample([2, 3, 4, 5, 7], 2)
    wa, wb = rng.sample(["Fizz", "Buzz", "Ping", "Pong", "Zip", "Zap"], 2)
    src = (f"def fizz_words(n):\n    out = []\n    for i in range(1, n + 1):\n"
           f"        word = ('{wa}' if i % {a} == 0 else '') + ('{wb}' if i % {b} == 0 else '')\n"
           f"        out.append(word or str(i))\n    return out\n")
    doc = (f"Return a list of strings for the numbers 1..n: '{wa}' for multiples of {a}, "
           f"'{wb}' for multiples of {b}, '{wa}{wb}' for multiples of both, otherwise the "
           f"number itself as a string.")
    return "fizz_words", doc, src, [(rng.randint(0, 30),) for _ in range(6)]


def t_digit_power_sum(rng):
    p = rng.randint(1, 5)
    which, cond = rng.choice([("", "True"), ("odd ", "int(d) % 2 == 1"),
                              ("even ", "int(d) % 2 == 0")])
    src = (f"def digit_power_sum(n):\n"
           f"    return sum(int(d) ** {p} for d in str(abs(n)) if {cond})\n")
    doc = f"Return the sum of the {which}decimal digits of `abs(n)`, each raised to the power {p}."
    return "digit_power_sum", doc, src, [(rng.randint(-9999, 99999),) for _ in range(7)]


def t_clean_palindrome(rng):
    ignore = rng.choice([" ", " ,.!?", " -_", ",.", " ,"])
    fold = rng.random() < 0.5
    char = "c.lower()" if fold else "c"
    src = (f"def clean_palindrome(s):\n    t = [{char} for c in s if c not in {ignore!r}]\n"
           f"    return t == t[::-1]\n")
    case = "letter case is ignored" if fold else "letter case matters"
    doc = (f"Return True if `s` reads the same forwards and backwards when the characters "
           f"{ignore!r} are removed ({case}), else False.")
    cases = ["Never odd or even", "abc", "A man, a plan", "No lemon, no melon!", "", "x-y_x",
             "Step on no pets", "race-car", rng.choice(_WORDS)]
    return "clean_palindrome", doc, src, [(c,) for c in cases]


def t_chunk(rng):
    k, keep = rng.randint(2, 6), rng.random() < 0.5
    stop = "len(items)" if keep else f"len(items) - {k} + 1"
    src = f"def chunk(items):\n    return [items[i:i + {k}] for i in range(0, {stop}, {k})]\n"
    last = "the last chunk may be shorter" if keep else "an incomplete last chunk is dropped"
    doc = (f"Split `items` into consecutive chunks of {k} elements ({last}) and return the "
           f"list of chunks.")
    return "chunk", doc, src, _lists(rng)


def t_count_starting(rng):
    letter = rng.choice("abcdefglmop")
    src = (f"def count_starting(words):\n"
           f"    return sum(1 for w in words if w[:1].lower() == {letter!r})\n")
    doc = (f"Return how many strings in the list `words` start with the letter {letter!r}, "
           f"ignoring case.")
    inputs = [([rng.choice(_WORDS).capitalize() if rng.random() < .3 else rng.choice(_WORDS)
                for _ in range(rng.randint(0, 6))],) for _ in range(7)]
    return "count_starting", doc, src, inputs


def t_kth_distinct(rng):
    k, largest = rng.randint(1, 5), rng.random() < 0.5
    src = (f"def kth_distinct(nums):\n    values = sorted(set(nums), reverse={largest})\n"
           f"    return values[{k - 1}] if len(values) >= {k} else None\n")
    which, top = ("largest", "maximum") if largest else ("smallest", "minimum")
    doc = (f"Return the {k}-th {which} distinct value in `nums` (1 = the {top}), or None if "
           f"there are fewer than {k} distinct values.")
    return "kth_distinct", doc, src, _lists(rng, 0, 8)


def t_times_divisible(rng):
    d = rng.randint(2, 12)
    src = (f"def times_divisible(n):\n    count = 0\n    while n % {d} == 0:\n"
           f"        n //= {d}\n        count += 1\n    return count\n")
    doc = f"For a positive integer `n`, return how many times it can be divided by {d} exactly."
    return "times_divisible", doc, src, [(d ** rng.randint(0, 5) * rng.randint(1, 40),)
                                         for _ in range(7)]


def t_left_pad(rng):
    width, fill = rng.randint(4, 10), rng.choice("0*.#")
    src = f"def left_pad(s):\n    return {fill!r} * max(0, {width} - len(s)) + s\n"
    doc = (f"Pad the string `s` on the left with {fill!r} characters up to a total length of "
           f"{width}; strings already that long are returned unchanged.")
    return "left_pad", doc, src, [(rng.choice(_WORDS)[: rng.randint(0, 6)] + str(i),)
                                  for i in range(6)]


def t_rle(rng):
    count_first = rng.random() < 0.5
    piece = "str(n) + c" if count_first else "c + str(n)"
    src = ("def rle(s):\n    out, i = [], 0\n    while i < len(s):\n        c, n = s[i], 1\n"
           "        while i + n < len(s) and s[i + n] == c:\n            n += 1\n"
           f"        out.append({piece})\n        i += n\n    return ''.join(out)\n")
    example = "'3a2b'" if count_first else "'a3b2'"
    doc = (f"Run-length encode `s`: each run of a repeated character becomes "
           f"{'the count followed by the character' if count_first else 'the character followed by the count'}"
           f" (so 'aaabb' gives {example}).")
    inputs = [("".join(rng.choice("aab") * rng.randint(1, 3) for _ in range(rng.randint(0, 5))),)
              for _ in range(7)]
    return "rle", doc, src, inputs


def t_scaled_in_range(rng):
    lo, m = rng.randint(-5, 10), rng.randint(2, 5)
    hi = lo + rng.randint(5, 25)
    src = f"def scaled_in_range(nums):\n    return [x * {m} for x in nums if {lo} <= x <= {hi}]\n"
    doc = (f"Keep the numbers of `nums` between {lo} and {hi} inclusive, multiply each by {m}, "
           f"and return them in their original order.")
    return "scaled_in_range", doc, src, _lists(rng)


def t_most_frequent(rng):
    smallest, most = rng.random() < 0.5, rng.random() < 0.5
    sign = "-" if most else ""
    key = f"({sign}counts[x], x)" if smallest else f"({sign}counts[x], items.index(x))"
    src = ("def most_frequent(items):\n    if not items:\n        return None\n    counts = {}\n"
           "    for x in items:\n        counts[x] = counts.get(x, 0) + 1\n"
           f"    return min(counts, key=lambda x: {key})\n")
    tie = "the smallest one" if smallest else "the one that appears first in the list"
    doc = (f"Return the {'most' if most else 'least'} common element of the list `items` (None "
           f"for an empty list); on a tie return {tie}.")
    return "most_frequent", doc, src, _lists(rng, 0, 5)


def t_to_camel(rng):
    sep, pascal = rng.choice(["_", "-", " ", "."]), rng.random() < 0.5
    first = "parts[0].capitalize()" if pascal else "parts[0].lower()"
    src = (f"def to_camel(s):\n    parts = [p for p in s.split({sep!r}) if p]\n"
           f"    if not parts:\n        return ''\n"
           f"    return {first} + ''.join(p.capitalize() for p in parts[1:])\n")
    style = "PascalCase: every word" if pascal else "camelCase: the first word lowercase, the others"
    doc = (f"Convert `s`, whose words are separated by {sep!r}, to {style} capitalised "
           f"(first letter upper, rest lower), separators removed (empty words ignored).")
    inputs = [(sep.join(rng.choice(_WORDS) for _ in range(rng.randint(0, 4))),) for _ in range(6)]
    return "to_camel", doc, src, inputs + [(sep * 2 + "Hello" + sep + "WORLD",)]


def t_product_mod(rng):
    m = rng.choice([7, 11, 13, 17, 19, 23, 97, 101, 1000, 1009])
    src = (f"def product_mod(nums):\n    result = 1\n    for x in nums:\n"
           f"        result = result * x % {m}\n    return result\n")
    doc = (f"Return the product of the integers in `nums` modulo {m} (as a value in 0..{m - 1}; "
           f"the product of an empty list is 1).")
    return "product_mod", doc, src, _lists(rng, 1, 60)


def t_alternating_sum(rng):
    sign = rng.choice([1, -1])
    src = (f"def alternating_sum(nums):\n"
           f"    return sum(x if i % 2 == 0 else -x for i, x in enumerate(nums)) * {sign}\n")
    what = "first element minus the second plus the third" if sign == 1 else \
        "second element minus the first, plus the fourth minus the third"
    doc = f"Return the alternating sum of `nums`: the {what}, and so on (0 for an empty list)."
    return "alternating_sum", doc, src, _lists(rng)


def t_keep_first_k(rng):
    k = rng.randint(1, 6)
    src = (f"def keep_first_k(items):\n    seen, out = {{}}, []\n    for x in items:\n"
           f"        seen[x] = seen.get(x, 0) + 1\n        if seen[x] <= {k}:\n"
           f"            out.append(x)\n    return out\n")
    doc = (f"Return `items` with each value kept at most {k} time(s): later repeats beyond the "
           f"first {k} occurrence(s) are dropped; order is preserved.")
    return "keep_first_k", doc, src, _lists(rng, 0, 4)


def t_polygonal(rng):
    sides = rng.randint(3, 12)
    src = f"def polygonal(n):\n    return (({sides} - 2) * n * n - ({sides} - 4) * n) // 2\n"
    doc = (f"Return the n-th {sides}-gonal number, ((s - 2) * n * n - (s - 4) * n) / 2 with "
           f"s = {sides}, as an integer.")
    return "polygonal", doc, src, [(rng.randint(0, 40),) for _ in range(6)]


def t_count_overlapping(rng):
    pattern = "".join(rng.choice("ab") for _ in range(rng.randint(2, 3)))
    src = (f"def count_overlapping(s):\n    p = {pattern!r}\n"
           f"    return sum(1 for i in range(len(s) - len(p) + 1) if s[i:i + len(p)] == p)\n")
    doc = f"Return how many times {pattern!r} occurs in `s`, counting overlapping occurrences."
    inputs = [("".join(rng.choice("ab") for _ in range(rng.randint(0, 12))),) for _ in range(7)]
    return "count_overlapping", doc, src, inputs


def t_char_histogram(rng):
    letters = rng.random() < 0.5
    cond = "c.isalpha()" if letters else "not c.isspace()"
    src = (f"def char_histogram(s):\n    counts = {{}}\n    for c in s.lower():\n"
           f"        if {cond}:\n            counts[c] = counts.get(c, 0) + 1\n    return counts\n")
    what = "letters" if letters else "non-whitespace characters"
    doc = (f"Return a dict mapping each of the {what} of `s` (lowercased) to how many times it "
           f"occurs.")
    alphabet = string.ascii_letters + "  12!"
    inputs = [("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))),)
              for _ in range(6)]
    return "char_histogram", doc, src, inputs


def t_nearest_multiple(rng):
    m, up = rng.randint(2, 12), rng.random() < 0.5
    tie = "upwards" if up else "downwards"
    cmp = ">=" if up else ">"
    src = (f"def nearest_multiple(n):\n    low = n - n % {m}\n"
           f"    return low + {m} if 2 * (n - low) {cmp} {m} else low\n")
    doc = (f"Round the integer `n` to the nearest multiple of {m}; when `n` is exactly halfway "
           f"between two multiples, round {tie}.")
    return "nearest_multiple", doc, src, [(rng.randint(-60, 200),) for _ in range(7)] + [(m // 2,)]


def t_count_in_range(rng):
    lo = rng.randint(-10, 20)
    hi = lo + rng.randint(0, 30)
    src = f"def count_in_range(nums):\n    return sum(1 for x in nums if {lo} <= x <= {hi})\n"
    doc = f"Return how many numbers in `nums` lie between {lo} and {hi}, both inclusive."
    return "count_in_range", doc, src, _lists(rng)


def t_weighted_sum(rng):
    weights = [rng.randint(-3, 5) for _ in range(rng.randint(2, 3))]
    src = (f"def weighted_sum(nums):\n    w = {weights!r}\n"
           f"    return sum(x * w[i % len(w)] for i, x in enumerate(nums))\n")
    doc = (f"Multiply the elements of `nums` by the weights {weights!r}, repeated cyclically "
           f"(element i gets weight number i mod {len(weights)}), and return the sum.")
    return "weighted_sum", doc, src, _lists(rng)


def t_capped_running_sum(rng):
    cap = rng.randint(10, 60)
    src = (f"def capped_running_sum(nums):\n    total, out = 0, []\n    for x in nums:\n"
           f"        total += x\n        if total > {cap}:\n            total = 0\n"
           f"        out.append(total)\n    return out\n")
    doc = (f"Return the running totals of `nums`, except that whenever the total exceeds {cap} it "
           f"is reset to 0 (and 0 is reported for that position).")
    return "capped_running_sum", doc, src, _lists(rng, -5, 30)


TEMPLATES: list[Callable[[random.Random], Spec]] = [
    t_count_chars, t_sum_multiples, t_rotate, t_caesar, t_clip_values, t_every_nth,
    t_long_words, t_fizz_words, t_digit_power_sum, t_clean_palindrome, t_chunk, t_count_starting,
    t_kth_distinct, t_times_divisible, t_left_pad, t_rle, t_scaled_in_range, t_most_frequent,
    t_to_camel, t_product_mod, t_alternating_sum, t_keep_first_k, t_polygonal,
    t_count_overlapping, t_char_histogram, t_nearest_multiple, t_count_in_range,
    t_weighted_sum, t_capped_running_sum,
]


def build(spec: Spec) -> dict[str, Any]:
    """Run the trusted reference to get expected outputs; returns the task fields."""
    name, doc, src, inputs = spec
    namespace: dict[str, Any] = {}
    exec(compile(src, f"<reference {name}>", "exec"), namespace)  # noqa: S102 - trusted template
    func = namespace[name]
    tests, calls, expected, seen = [], [], [], set()
    for args in inputs:
        key = repr(args)
        if key in seen:
            continue
        seen.add(key)
        calls.append(encode([list(args), {}]))
        value = func(*args)
        expected.append(encode(value))
        tests.append((f"{name}({', '.join(repr(a) for a in args)})", value))
    signature = src.splitlines()[0][len("def "):-1]
    return {"name": name, "signature": signature, "doc": doc, "solution": src,
            "tests": [f"assert {call} == {value!r}" for call, value in tests],
            "calls": calls, "expected": expected, "example": tests[0]}
