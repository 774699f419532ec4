#!/usr/bin/env python3
"""Seeded generator of the search benchmark's records.

Writes N varied JSON records (~500 bytes each as compact JSON) in two forms:

  OUT_DIR/records.jsonl  one compact JSON record per line (UTF-8, not ASCII-escaped),
                         in load order; what is POSTed to intake
  OUT_DIR/records.copy   PostgreSQL COPY text format, two tab-separated columns
                         (created_at, payload) in the same order; created_at grows by
                         50 µs per record (about the spacing of a 20k records/s load)
  OUT_DIR/meta.json      {"records", "payload_bytes", "seed", "created_at_start", ...}

payload_bytes is the sum of the UTF-8 byte lengths of the compact JSON texts, which
is what intake stores and searches (its "payload text").

Records come in four kinds (order, signup, reading, ticket) with nested objects,
arrays, names and cities (some non-ASCII), product words, e-mail addresses, numbers,
and free-text notes drawn from a vocabulary of 4,000 words with a Zipf-like
distribution (Zipf-Mandelbrot, P(rank r) ~ 1 / (r + 3)^1.2): the first few hundred
words are real English words, the rest are pronounceable made-up words from a seeded
syllable generator, so there are very common words and rarer ones. A long rare tail
completes it: with probability 0.05 a text also gets one of 5,000 further made-up
words (8+ letters), so each of those occurs in about 10 records per million. Every record carries "seq" (its position
in load order), which the benchmark uses to compare the two systems' answers.

The output depends only on (seed, N): the records are made in chunks of 10,000, each
chunk from its own generator seeded with (seed, chunk number), so chunks can be made
in parallel (--jobs) and a larger N extends a smaller one.

--parts K (default 1) makes each record out of K generated ones: the first, with the other
K - 1 (without their "seq") in a list under "related", so that K = 2 gives records of about
1 KB that still differ from each other (benches/lean.sh's data dir step). --no-copy skips
records.copy. With the defaults the output is the same as before these options.

Usage: search_gen.py --records N --out DIR [--seed S] [--jobs J] [--parts K] [--no-copy]
"""

import argparse
import datetime
import json
import multiprocessing
import os
import random
import sys
import unicodedata

CHUNK = 10_000
VOCAB_SIZE = 4000
ZIPF_S = 1.2
ZIPF_Q = 3.0          # Zipf-Mandelbrot offset: P(rank r) ~ 1 / (r + q)^s
RARE_SIZE = 5000      # the rare tail: words outside the ranked vocabulary ...
RARE_P = 0.05         # ... one of which goes into a text with this probability
CREATED_AT_START = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
CREATED_AT_STEP_US = 50

# The most frequent words of the notes (their order here is not their rank: the
# vocabulary is shuffled with the seed before ranks are assigned, within the real
# words first and then the made-up ones).
COMMON_WORDS = """
the a to and of in is for on it with that this was be at as by not are from or have
an but we you they he she his her our your their there them then than when what which
who will would could should can may might must shall do does did done has had been being
please thanks thank customer order delivery parcel package shipped shipping arrived
arrive late early today tomorrow yesterday morning evening night week weekend monday
tuesday wednesday thursday friday saturday sunday call called email emailed message
replied reply ticket refund refunded return returned exchange broken damaged missing
wrong size colour color blue red green black white grey yellow small medium large extra
price invoice payment paid card bank transfer discount coupon code voucher gift wrap
note address door gate neighbour neighbor floor flat apartment building street road
office reception warehouse courier driver tracking number status update updated
delayed cancel cancelled cancellation confirm confirmed confirmation request requested
question answer issue problem error fixed resolved pending open closed escalated urgent
priority normal low high again still already soon never always sometimes usually maybe
quick quickly slow slowly fast good great bad poor nice happy unhappy satisfied service
support team manager agent account login password reset sign signup subscription plan
premium basic trial upgrade downgrade renew renewal expired active inactive device
sensor battery temperature humidity reading firmware restart offline online signal
weak strong outside inside kitchen garden garage bedroom window heating cooling water
leak noise smell light lamp cable charger screen keyboard mouse laptop phone tablet
camera speaker headphones watch shirt shoes jacket coffee tea mug bottle book notebook
pen chair table desk shelf box bag left right front back near next before after during
over under between about around into through across without within again because
however although while where here also only just very really more most less some any
many much few each every other another same different new old first last next second
third time times day days hour hours minute minutes year years month months
""".split()

ONSETS = ["b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gl", "gr", "k", "l", "m", "n",
          "p", "pl", "pr", "r", "s", "sl", "sn", "st", "t", "tr", "v", "z", "sh", "th", "kr"]
NUCLEI = ["a", "e", "i", "o", "u", "ai", "ou", "ea", "io", "ee"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "nd", "rt", "st", "ck", "ng", "ll"]

FIRST_NAMES = """Anna Marta Jan Piotr Lukas Sofia Emma Olivia Liam Noah Mia Lea Ella Hugo Louis
Chloé Zoë José María Lucía Mateo Søren Åsa Björn Jürgen Günter Ömer Łukasz Paweł Agnieszka
François Hélène Noémie Renée João Conceição Dvořák Miloš Ivana Tereza Aleksandr Dmitri Olga
Yuki Haruto Sakura Wei Jun Mei Aarav Priya Ananya Kwame Amara Chidi Fatima Omar Layla Youssef
Sean Siobhán Eoin Niamh Tom Kate James Laura David Sarah Daniel Hannah Peter Julia Paul
Nina Victor Elena Marco Giulia Luca Chiara Tomás Inés Raúl Ingrid Henrik Freja Eero Aino""".split()
LAST_NAMES = """Kowalska Nowak Wiśniewski Müller Schmidt Schneider Fischer Weber Meyer Wagner
Becker Hoffmann Dubois Martin Bernard Lefèvre Moreau García Fernández González Rodríguez
López Martínez Sánchez Pérez Rossi Russo Ferrari Esposito Bianchi Romano Jensen Nielsen
Hansen Pedersen Andersson Johansson Karlsson Nilsson Virtanen Korhonen Mäkinen Novák Svoboda
Dvořáková Horváth Nagy Kovács Tóth Popescu Ionescu Papadopoulos Yılmaz Kaya Demir Smith
Jones Williams Brown Taylor Wilson Evans Thomas Roberts Walsh Murphy O'Brien Kelly Byrne
Tanaka Suzuki Takahashi Watanabe Wang Li Zhang Liu Chen Singh Kumar Sharma Patel Okafor
Mensah Diallo Haddad Khoury Silva Santos Oliveira Souza Costa Pereira""".split()
CITIES = [("Warszawa", "PL"), ("Kraków", "PL"), ("Gdańsk", "PL"), ("Berlin", "DE"),
          ("München", "DE"), ("Köln", "DE"), ("Hamburg", "DE"), ("Paris", "FR"),
          ("Lyon", "FR"), ("Besançon", "FR"), ("Madrid", "ES"), ("Sevilla", "ES"),
          ("A Coruña", "ES"), ("Lisboa", "PT"), ("Porto", "PT"), ("Roma", "IT"),
          ("Milano", "IT"), ("Torino", "IT"), ("Zürich", "CH"), ("Genève", "CH"),
          ("Wien", "AT"), ("Praha", "CZ"), ("Brno", "CZ"), ("Budapest", "HU"),
          ("København", "DK"), ("Aarhus", "DK"), ("Malmö", "SE"), ("Göteborg", "SE"),
          ("Stockholm", "SE"), ("Oslo", "NO"), ("Tromsø", "NO"), ("Helsinki", "FI"),
          ("Dublin", "IE"), ("Cork", "IE"), ("London", "GB"), ("Manchester", "GB"),
          ("Edinburgh", "GB"), ("Amsterdam", "NL"), ("Utrecht", "NL"), ("Bruxelles", "BE"),
          ("Αθήνα", "GR"), ("Москва", "RU"), ("Київ", "UA"), ("東京", "JP"), ("大阪", "JP"),
          ("서울", "KR"), ("São Paulo", "BR"), ("Bogotá", "CO"), ("México", "MX"),
          ("Montréal", "CA"), ("Toronto", "CA"), ("New York", "US"), ("Chicago", "US"),
          ("Austin", "US"), ("Seattle", "US"), ("Reykjavík", "IS"), ("Tallinn", "EE"),
          ("Rīga", "LV"), ("Vilnius", "LT"), ("Ljubljana", "SI"), ("Zagreb", "HR")]
DOMAINS = ["example.com", "example.org", "example.net", "mail.example", "post.example",
           "inbox.example", "corp.example", "shop.example"]
ADJECTIVES = """organic recycled wireless ergonomic compact premium classic vintage
stainless bamboo ceramic leather cotton woollen waterproof foldable portable smart
heavy light slim rugged""".split()
MATERIALS = """oak walnut steel aluminium glass linen wool silk denim canvas copper brass
granite marble cork rubber""".split()
PRODUCTS = """mug kettle teapot backpack lamp chair stool desk shelf jacket scarf sweater
t-shirt sneakers boots umbrella blanket pillow towel notebook pen headphones speaker
charger cable keyboard mouse monitor router thermostat kettlebell yoga-mat bicycle
helmet tent lantern bottle grinder""".split()
COLOURS = """black white grey navy blue teal green olive yellow orange red burgundy pink
purple beige brown""".split()
TAGS = """vip new returning wholesale gift express eu us apac mobile web app newsletter
b2b b2c promo spring summer autumn winter beta legacy""".split()
PLANS = ["free", "starter", "pro", "team", "enterprise"]
CURRENCIES = ["EUR", "USD", "GBP", "PLN", "SEK", "CHF", "JPY"]
LOCALES = ["en-GB", "en-US", "de-DE", "fr-FR", "es-ES", "pl-PL", "pt-BR", "it-IT", "sv-SE",
           "ja-JP", "ko-KR", "uk-UA", "el-GR"]
MODELS = ["TH-200", "TH-210", "AQ-5", "AQ-7 Pro", "WX-1000", "EnviroSense 3", "Nimbus Mini"]
PRIORITIES = ["low", "normal", "high", "urgent"]
SUBJECTS = ["Where is my parcel", "Refund not received", "Wrong size delivered",
            "Cannot log in", "Invoice request", "Item arrived damaged",
            "Change delivery address", "Subscription renewal question",
            "Device keeps going offline", "Battery drains quickly"]


def make_vocab(seed):
    """(ranked vocabulary, rare words): index 0 of the first is the most frequent word."""
    rng = random.Random(f"vocab-{seed}")
    real = list(dict.fromkeys(COMMON_WORDS))
    rng.shuffle(real)
    seen = set(real)

    def made_up(count, syllables, min_len):
        out = []
        while len(out) < count:
            n = rng.choice(syllables)
            word = "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
                           for _ in range(n))
            if min_len <= len(word) <= 16 and word not in seen:
                seen.add(word)
                out.append(word)
        return out

    vocab = real + made_up(VOCAB_SIZE - len(real), (2, 2, 3, 3, 3, 4), 4)
    rare = made_up(RARE_SIZE, (3, 4), 8)
    return vocab, rare


def cumulative_weights(n):
    total = 0.0
    out = []
    for r in range(1, n + 1):
        total += 1.0 / ((r + ZIPF_Q) ** ZIPF_S)
        out.append(total)
    return out


class Maker:
    def __init__(self, seed):
        self.seed = seed
        self.vocab, self.rare = make_vocab(seed)
        self.cum = cumulative_weights(len(self.vocab))

    def words(self, rng, lo, hi):
        return rng.choices(self.vocab, cum_weights=self.cum, k=rng.randint(lo, hi))

    def text_words(self, rng, lo, hi):
        w = self.words(rng, lo, hi)
        if rng.random() < RARE_P:
            w.insert(rng.randrange(len(w) + 1), rng.choice(self.rare))
        return w

    def sentence(self, rng, lo, hi):
        w = self.text_words(rng, lo, hi)
        w[0] = w[0].capitalize()
        return " ".join(w) + rng.choice((".", ".", ".", "!", "?", ";"))

    def person(self, rng):
        first = rng.choice(FIRST_NAMES)
        last = rng.choice(LAST_NAMES)
        local = unicodedata.normalize("NFKD", (first + "." + last).lower().replace("'", ""))
        local = local.replace("ł", "l").replace("ø", "o").encode("ascii", "ignore").decode()
        return {
            "name": f"{first} {last}",
            "email": f"{local}{rng.randint(1, 99)}@{rng.choice(DOMAINS)}",
        }

    def address(self, rng):
        city, country = rng.choice(CITIES)
        return {
            "street": f"{rng.choice(self.vocab[300:1500]).capitalize()} "
                      f"{rng.choice(('Street', 'Road', 'Lane', 'Allee', 'Rue', 'Via', 'ul.'))} "
                      f"{rng.randint(1, 250)}",
            "city": city,
            "postcode": f"{rng.randint(1000, 99999):05d}",
            "country": country,
        }

    def product(self, rng):
        return (f"{rng.choice(ADJECTIVES)} {rng.choice(MATERIALS)} {rng.choice(PRODUCTS)}, "
                f"{rng.choice(COLOURS)}")

    def record(self, rng, seq):
        kind = rng.choices(("order", "signup", "reading", "ticket"), weights=(4, 2, 2, 2))[0]
        if kind == "order":
            items = []
            for _ in range(rng.randint(1, 3)):
                items.append({
                    "sku": f"{rng.choice(PRODUCTS)[:4].upper()}-{rng.randint(100, 9999)}",
                    "name": self.product(rng),
                    "qty": rng.randint(1, 5),
                    "unit_price": round(rng.uniform(2, 400), 2),
                })
            total = round(sum(i["qty"] * i["unit_price"] for i in items), 2)
            cust = self.person(rng)
            cust["address"] = self.address(rng)
            rec = {
                "kind": "order", "seq": seq,
                "order": {
                    "id": f"ord_{rng.getrandbits(40):010x}",
                    "currency": rng.choice(CURRENCIES),
                    "total": total,
                    "paid": rng.random() < 0.9,
                    "coupon": None if rng.random() < 0.8 else f"SAVE{rng.randint(5, 50)}",
                    "items": items,
                },
                "customer": cust,
                "tags": rng.sample(TAGS, rng.randint(0, 3)),
                "note": self.sentence(rng, 6, 22),
            }
        elif kind == "signup":
            user = self.person(rng)
            user.update({
                "id": f"usr_{rng.getrandbits(32):08x}",
                "age": rng.randint(16, 90),
                "locale": rng.choice(LOCALES),
                "city": rng.choice(CITIES)[0],
            })
            rec = {
                "kind": "signup", "seq": seq,
                "user": user,
                "plan": rng.choice(PLANS),
                "referrer": rng.choice((None, "search", "friend", "ad", "newsletter")),
                "consents": {"marketing": rng.random() < 0.4, "terms": True},
                "interests": self.words(rng, 1, 4),
                "note": self.sentence(rng, 10, 30),
            }
        elif kind == "reading":
            city, country = rng.choice(CITIES)
            rec = {
                "kind": "reading", "seq": seq,
                "device": {
                    "id": f"dev-{rng.randint(1, 50000):05d}",
                    "model": rng.choice(MODELS),
                    "firmware": f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 99)}",
                    "site": {"city": city, "country": country,
                             "room": rng.choice(("kitchen", "garage", "office", "cellar",
                                                 "attic", "lab", "greenhouse"))},
                },
                "temperature_c": round(rng.gauss(21, 6), 1),
                "humidity_pct": rng.randint(15, 95),
                "battery_mv": rng.randint(2400, 4200),
                "samples": [round(rng.uniform(0, 100), 2) for _ in range(rng.randint(3, 8))],
                "ok": rng.random() < 0.95,
                "note": self.sentence(rng, 8, 26),
            }
        else:
            cust = self.person(rng)
            msgs = []
            for _ in range(rng.randint(1, 3)):
                msgs.append({
                    "from": rng.choice(("customer", "agent")),
                    "text": self.sentence(rng, 5, 16),
                })
            rec = {
                "kind": "ticket", "seq": seq,
                "ticket": {
                    "id": rng.randint(10000, 999999),
                    "subject": rng.choice(SUBJECTS),
                    "priority": rng.choice(PRIORITIES),
                    "channel": rng.choice(("email", "chat", "phone", "form")),
                },
                "customer": cust,
                "messages": msgs,
                "tags": rng.sample(TAGS, rng.randint(0, 2)),
            }
        return rec


_MAKER = None


def _init(seed):
    global _MAKER
    _MAKER = Maker(seed)


def make_chunk(args):
    """Records [start, end) of the set: (jsonl bytes, copy bytes, payload bytes)."""
    seed, chunk_no, start, end, parts = args
    rng = random.Random(f"chunk-{seed}-{chunk_no}")
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    jl = []
    cp = []
    payload_bytes = 0
    step = datetime.timedelta(microseconds=CREATED_AT_STEP_US)
    for seq in range(start, end):
        rec = _MAKER.record(rng, seq)
        if parts > 1:
            rec["related"] = [_MAKER.record(rng, seq) for _ in range(parts - 1)]
            for other in rec["related"]:
                del other["seq"]
        text = dumps(rec)
        raw = text.encode("utf-8")
        payload_bytes += len(raw)
        jl.append(raw)
        ts = (CREATED_AT_START + step * seq).strftime("%Y-%m-%d %H:%M:%S.%f+00")
        # COPY text format: backslash is the escape character; compact JSON has no raw
        # tab, newline or carriage return (JSON escapes them), so only "\" needs doubling.
        cp.append(ts.encode() + b"\t" + raw.replace(b"\\", b"\\\\"))
    return b"\n".join(jl) + b"\n", b"\n".join(cp) + b"\n", payload_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20240101)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--parts", type=int, default=1,
                    help="generated records per record (the rest under \"related\")")
    ap.add_argument("--no-copy", action="store_true", help="do not write records.copy")
    args = ap.parse_args()
    if args.records < 1:
        sys.exit("search_gen.py: --records must be at least 1")
    if args.parts < 1:
        sys.exit("search_gen.py: --parts must be at least 1")
    os.makedirs(args.out, exist_ok=True)

    tasks = []
    for chunk_no, start in enumerate(range(0, args.records, CHUNK)):
        tasks.append((args.seed, chunk_no, start, min(start + CHUNK, args.records), args.parts))

    payload_bytes = 0
    copy_path = os.devnull if args.no_copy else os.path.join(args.out, "records.copy")
    with open(os.path.join(args.out, "records.jsonl"), "wb") as jf, open(copy_path, "wb") as cf:
        if args.jobs > 1 and len(tasks) > 1:
            with multiprocessing.Pool(args.jobs, initializer=_init, initargs=(args.seed,)) as pool:
                for jl, cp, nbytes in pool.imap(make_chunk, tasks):
                    jf.write(jl)
                    cf.write(cp)
                    payload_bytes += nbytes
        else:
            _init(args.seed)
            for t in tasks:
                jl, cp, nbytes = make_chunk(t)
                jf.write(jl)
                cf.write(cp)
                payload_bytes += nbytes

    meta = {
        "records": args.records,
        "payload_bytes": payload_bytes,
        "avg_payload_bytes": round(payload_bytes / args.records, 1),
        "seed": args.seed,
        "parts": args.parts,
        "vocab_size": VOCAB_SIZE,
        "zipf_s": ZIPF_S,
        "zipf_q": ZIPF_Q,
        "rare_words": RARE_SIZE,
        "rare_p": RARE_P,
        "created_at_start": CREATED_AT_START.isoformat(),
        "created_at_step_us": CREATED_AT_STEP_US,
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
