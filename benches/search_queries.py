#!/usr/bin/env python3
"""The search benchmark's fixed query set: 50 queries in 5 classes of 10.

The queries were picked for the data of `search_gen.py` with its default seed
(20240101) at 1,000,000 records; the hit counts that PostgreSQL finds are printed by
every run, so a changed generator shows at once when a class no longer is what it
claims. Every query is ASCII letters or digits only: an alphanumeric string matches
inside one run of letters/digits, and those runs are the same in intake's compact JSON
text (`{"a":1,"b":[1,2]}`) and in PostgreSQL's jsonb text form (`{"a": 1, "b": [1, 2]}`:
spaces after `:` and `,`, keys reordered), so a query means the same on both sides.

Classes:
  selective  rare words: made-up words from the generator's rare tail and its
             least frequent ranked words (tens to a few hundred hits per million)
  common     frequent words and key names (tens of thousands of hits and more)
  number     digit strings of 3 to 6 characters
  trigram    3-character queries, frequent and infrequent ones
  nomatch    strings that occur nowhere (letter pairs the generator never makes)

`python3 search_queries.py` prints the set; `python3 search_queries.py --count FILE`
counts in a records.jsonl file the records that contain each query (case-insensitive),
the same count PostgreSQL's `count(*)` gives. `python3 search_queries.py --grams FILE
[CLASS ...]` counts, for each query of the classes (all without), the records that contain
each of its trigrams and those that contain all of them: the postings a trigram index reads
for it and the candidates it checks, against the records that match.
"""

import sys

CLASSES = ("selective", "common", "number", "trigram", "nomatch")

# Hit counts in the comments: records containing the query at 1,000,000 records.
QUERIES = {
    "selective": [
        "tirfoutrokrear",   # 6    rare tail
        "pleerdeckrea",     # 9    rare tail
        "britheartdea",     # 9    rare tail
        "zenddroumnock",    # 14   rare tail
        "slobromer",        # 22   rare tail
        "nockchim",         # 271  Zipf rank ~3800
        "gastleng",         # 285  Zipf rank ~3800
        "loulkor",          # 289  Zipf rank ~3800
        "tengrindstio",     # 301  Zipf rank ~3800
        "prongsnick",       # 328  Zipf rank ~3800
    ],
    "common": [
        "email",            # 802,016  key name
        "street",           # 653,591  key name and word
        "customer",         # 601,760  key name and word
        "delivery",         # 441,143
        "laptop",           # 343,384
        "resolved",         # 310,908
        "temperature",      # 206,171  key name (temperature_c) and word
        "tracking",         # 89,426
        "parcel",           # 68,833
        "warehouse",        # 51,237
    ],
    "number": [
        "100",              # 43,670
        "123",              # 15,168
        "777",              # 9,076
        "2500",             # 837
        "2024",             # 701
        "4821",             # 645
        "31337",            # 36
        "90210",            # 34
        "123456",           # 3
        "314159",           # 2
    ],
    "trigram": [
        "ail",              # 828,464
        "ing",              # 726,767
        "ord",              # 464,453
        "the",              # 239,781
        "oak",              # 47,860
        "vip",              # 36,450
        "ump",              # 9,115
        "kow",              # 8,732
        "tok",              # 791
        "zeb",              # 7
    ],
    "nomatch": [
        "qzxj",
        "zqwv",
        "vxqj",
        "jjqqx",
        "qxjzv",
        "xyzzyq",
        "zzzqqq",
        "parcelrefund",     # two common words run together: many candidates, no match
        "deliveryrefund",
        "customerinvoice",
    ],
}


def all_queries():
    """[(class, q)] in a fixed order."""
    return [(c, q) for c in CLASSES for q in QUERIES[c]]


def count_in_file(path):
    qs = all_queries()
    counts = {q: 0 for _, q in qs}
    folded = [(q, q.lower()) for _, q in qs]
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.lower()
            for q, fq in folded:
                if fq in text:
                    counts[q] += 1
    return counts


def trigrams(q):
    """The distinct trigrams of a query, in order (what intake's index looks up; a stop
    trigram of the index is left out there, which this cannot know)."""
    grams = []
    for i in range(len(q) - 2):
        if q[i:i + 3] not in grams:
            grams.append(q[i:i + 3])
    return grams


def grams_in_file(path, classes):
    """{q: (records holding q, {gram: records holding it}, records holding every gram)}."""
    qs = [(q, q.lower(), trigrams(q.lower())) for c, q in all_queries() if c in classes]
    out = {q: [0, {g: 0 for g in grams}, 0] for q, _, grams in qs}
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.lower()
            for q, fq, grams in qs:
                row = out[q]
                every = True
                for g in grams:
                    if g in text:
                        row[1][g] += 1
                    else:
                        every = False
                if every:
                    row[2] += 1
                    if fq in text:
                        row[0] += 1
    return out


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--grams":
        classes = sys.argv[3:] or list(CLASSES)
        print("class\tquery\tmatches\tholding every trigram\trecords per trigram")
        rows = grams_in_file(sys.argv[2], classes)
        for c, q in all_queries():
            if q in rows:
                matches, per_gram, every = rows[q]
                grams = " ".join(f"{g}:{n}" for g, n in per_gram.items())
                print(f"{c}\t{q}\t{matches}\t{every}\t{grams}")
    elif len(sys.argv) == 3 and sys.argv[1] == "--count":
        counts = count_in_file(sys.argv[2])
        for c, q in all_queries():
            print(f"{c}\t{q}\t{counts[q]}")
    else:
        for c, q in all_queries():
            print(f"{c}\t{q}")


if __name__ == "__main__":
    main()
